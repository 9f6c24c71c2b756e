"""TileIR: typed ops with nested regions, SSA Tile values, a verifier, a printer and a parser."""

from tilenest.ir.parser import parse_function as parse_function
from tilenest.ir.printer import print_function as print_function
from tilenest.ir.verify import verify as verify
