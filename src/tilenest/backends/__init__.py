"""Backends: each turns TileIR (plus a plan) into execution; `reference` defines the semantics."""
