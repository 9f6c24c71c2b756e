"""TileIR: typed ops with nested regions, SSA Tile values, a verifier, a printer and a parser."""
