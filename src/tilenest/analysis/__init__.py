"""Analyses of TileIR shared by the planner and the backends (one code path decides)."""
