"""The front end: dims, regions, Tile values, views, one-pass capture, diagnostics."""
