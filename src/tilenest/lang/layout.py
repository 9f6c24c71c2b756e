"""Dimension matching by identity: broadcasting two layouts and aligning a tile to a region.

Named dims match by identity. Dims left over pair in order, right-aligned (as numpy
aligns trailing axes), when at least one dim of the pair is anonymous; two distinct named
dims never pair. Extent-1 dims broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.errors import ShapeError
from tilenest.ir.types import Dim, TileType


@dataclass(frozen=True)
class Layout:
    dims: tuple[Dim, ...]
    shape: tuple[int, ...]


def describe(t: TileType | Layout) -> str:
    inner = ", ".join(f"{d.describe()}:{e}" for d, e in zip(t.dims, t.shape, strict=True))
    return f"[{inner}]"


def _pair_leftovers(a_dims, a_left, b_dims, b_left, pairs: dict[int, int]) -> None:
    ia, ib = len(a_left) - 1, len(b_left) - 1
    while ia >= 0 and ib >= 0:
        da, db = a_dims[a_left[ia]], b_dims[b_left[ib]]
        if not da.anonymous and not db.anonymous:
            # Two different named dims: never the same dimension. Skip both.
            ia -= 1
            ib -= 1
            continue
        pairs[a_left[ia]] = b_left[ib]
        ia -= 1
        ib -= 1


def _match(a: TileType | Layout, b: TileType | Layout) -> dict[int, int]:
    pairs: dict[int, int] = {}
    for i, d in enumerate(a.dims):
        for j, e in enumerate(b.dims):
            if d is e:
                pairs[i] = j
    a_left = [i for i in range(len(a.dims)) if i not in pairs]
    taken = set(pairs.values())
    b_left = [j for j in range(len(b.dims)) if j not in taken]
    _pair_leftovers(a.dims, a_left, b.dims, b_left, pairs)
    return pairs


def _same_layout(a: TileType | Layout, b: TileType | Layout) -> bool:
    """The same distinct dims in the same order with the same extents: every dim pairs with
    itself, which is what `_match` and `_merge` would conclude."""
    return (a.shape == b.shape and len(a.dims) == len(b.dims)
            and all(d is e for d, e in zip(a.dims, b.dims, strict=True))
            and len({id(d) for d in a.dims}) == len(a.dims))


def broadcast_layouts(
    a: TileType | Layout, b: TileType | Layout
) -> tuple[Layout, tuple[int | None, ...], tuple[int | None, ...]]:
    """The common layout of two operands and, per result axis, each operand's source axis.

    The result lists a's dims, then b's unpaired ones; but when every dim of `a` pairs with
    one of a higher-rank `b` (a row against a matrix), it keeps b's order, as numpy does.
    Otherwise `w + x` for an anonymous row `w` would come out transposed, and a later store,
    which pairs anonymous dims right-aligned, would silently transpose it back wrongly.
    """
    if _same_layout(a, b):  # the common case (operands of one elementwise chain)
        axes = tuple(range(len(a.dims)))
        return Layout(tuple(a.dims), tuple(a.shape)), axes, axes
    pairs = _match(a, b)
    if len(pairs) == len(a.dims) < len(b.dims):
        layout, map_b, map_a = _merge(b, a, {j: i for i, j in pairs.items()})
        return layout, map_a, map_b
    return _merge(a, b, pairs)


def _merge(
    a: TileType | Layout, b: TileType | Layout, pairs: dict[int, int]
) -> tuple[Layout, tuple[int | None, ...], tuple[int | None, ...]]:
    dims: list[Dim] = []
    shape: list[int] = []
    map_a: list[int | None] = []
    map_b: list[int | None] = []
    for i, (d, ea) in enumerate(zip(a.dims, a.shape, strict=True)):
        j = pairs.get(i)
        if j is None:
            dims.append(d)
            shape.append(ea)
            map_a.append(i)
            map_b.append(None)
            continue
        eb = b.shape[j]
        if ea != eb and 1 not in (ea, eb):
            raise ShapeError(
                f"cannot broadcast {describe(a)} with {describe(b)}: dim {d.describe()} has "
                f"extent {ea} and {b.dims[j].describe()} has extent {eb}"
            )
        dims.append(b.dims[j] if d.anonymous and not b.dims[j].anonymous else d)
        shape.append(max(ea, eb))
        map_a.append(i)
        map_b.append(j)
    paired_b = set(pairs.values())
    for j, (d, eb) in enumerate(zip(b.dims, b.shape, strict=True)):
        if j not in paired_b:
            dims.append(d)
            shape.append(eb)
            map_a.append(None)
            map_b.append(j)
    return Layout(tuple(dims), tuple(shape)), tuple(map_a), tuple(map_b)


def align_to_region(tile: TileType, region: Layout, what: str = "store") -> tuple[int | None, ...]:
    """Source axes that relayout `tile` onto `region` (a store may broadcast a subset)."""
    pairs = _match(region, tile)
    src: list[int | None] = [pairs.get(r) for r in range(len(region.dims))]
    used = {j for j in src if j is not None}
    for j, (d, e) in enumerate(zip(tile.dims, tile.shape, strict=True)):
        if j not in used and e != 1:
            names = ", ".join(x.describe() for x in region.dims)
            raise ShapeError(
                f"{what}: the tile {describe(tile)} has dim {d.describe()} (extent {e}) that "
                f"matches no dim of the region {describe(region)} (dims {names}); dims match "
                f"by identity — use the same tn.axis, or .with_dims on the view"
            )
    for r, j in enumerate(src):
        if j is not None and tile.shape[j] not in (1, region.shape[r]):
            raise ShapeError(
                f"{what}: the tile {describe(tile)} does not fit the region {describe(region)}: "
                f"dim {tile.dims[j].describe()} has extent {tile.shape[j]}, the region "
                f"needs {region.shape[r]}"
            )
    return tuple(src)
