"""One traversal definition, two renderings: the statements of `plan.traversal` evaluated on
integers (what the cpu lowering's Arith runs) and printed as source (what the cuda lowering
emits) give the same coordinates on every ordinal of small grids, and both are bijections."""

from __future__ import annotations

import itertools
import random

import pytest

from tilenest.plan import traversal as tr
from tilenest.plan.traversal import Expr, IntArith


def _run(lines: list[str], **inputs: int) -> dict[str, object]:
    """Execute rendered lines as Python (`min` for `tl.minimum`)."""
    scope: dict[str, object] = {"min": min, **inputs}
    exec("\n".join(lines), scope)  # noqa: S102 - lines rendered by the module under test
    return scope


@pytest.mark.parametrize("rows", range(1, 8))
@pytest.mark.parametrize("cols", range(1, 8))
def test_both_renderings_agree_and_are_bijections(rows: int, cols: int) -> None:
    everything = sorted(itertools.product(range(rows), range(cols)))
    for gr, gc in itertools.product(range(1, 10), repeat=2):
        lines = tr.grouped_lines("r", rows, cols, gr, gc, "row", "col", "g_", minf="min")
        as_ints, as_text, cut = [], [], []
        for j in range(rows * cols):
            as_ints.append(tr.grid_coords(j, rows, cols, gr, gc))
            scope = _run(lines, r=j)
            as_text.append((scope["row"], scope["col"]))
            cut.append(tr.grouped_coords(IntArith(), j, rows, cols, gr, gc))
        assert sorted(as_ints) == everything, (rows, cols, gr, gc)  # no holes, no duplicates
        assert as_text == as_ints, (rows, cols, gr, gc)
        # The cpu lowering cuts the groups to the grid: the same map.
        assert cut == as_ints, (rows, cols, gr, gc)


@pytest.mark.parametrize("extents", [(5,), (3, 4), (3, 4, 5), (2, 3, 2, 3)])
def test_program_lines_compute_program_coords(extents: tuple[int, ...]) -> None:
    total = 1
    for e in extents:
        total *= e
    names = [f"x{a}" for a in range(len(extents))]
    for order in itertools.permutations(range(len(extents))):
        for trav in ((1, 1), (2, 3), (4, 1), (8, 8)):
            if len(extents) < 2 and trav != (1, 1):
                continue
            lines = tr.program_lines("p", extents, order, *trav, names, minf="min")
            seen = set()
            for p in range(total):
                scope = _run(lines, p=p)
                got = tuple(scope[n] for n in names)
                assert got == tr.program_coords(p, extents, order, trav), (order, trav, p)
                seen.add(got)
            assert seen == set(itertools.product(*(range(e) for e in extents)))


def test_triton_text_of_a_grouped_grid() -> None:
    assert tr.grouped_lines("pid", 10, 6, 4, 2, "c0", "c1", "tr_") == [
        "tr_band_size = 4 * 6",
        "tr_band = pid // tr_band_size",
        "tr_first_row = tr_band * 4",
        "tr_h = tl.minimum(4, 10 - tr_first_row)",
        "tr_in_band = pid - tr_band * tr_band_size",
        "tr_rect_size = tr_h * 2",
        "tr_rect = tr_in_band // tr_rect_size",
        "tr_first_col = tr_rect * 2",
        "tr_w = tl.minimum(2, 6 - tr_first_col)",
        "tr_t = tr_in_band - tr_rect * tr_rect_size",
        "c0 = tr_first_row + tr_t // tr_w",
        "c1 = tr_first_col + tr_t % tr_w",
    ]
    # Row-major groups, and batches outside the grid.
    assert tr.program_lines("pid", [2, 3, 4], (0, 1, 2), 1, 1, ["a", "b", "c"]) == [
        "tr_batch = pid // 12", "tr_grid = pid % 12", "a = tr_batch",
        "b = tr_grid // 4", "c = tr_grid % 4"]


def _random_tree(rng: random.Random, depth: int) -> tr.Operand:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["x", "y", rng.randint(1, 9)])
    return Expr(rng.choice(["add", "sub", "mul", "div", "rem", "min"]),
                _random_tree(rng, depth - 1), _random_tree(rng, depth - 1))


def test_rendering_parenthesizes_like_evaluation() -> None:
    """Printed source means what the tree means, whatever the nesting (a non-associative
    right operand or a sum under a product is parenthesized)."""
    assert tr.render([("z", Expr("sub", "x", Expr("sub", "y", 1)))], {}, "") == \
        ["z = x - (y - 1)"]
    assert tr.render([("z", Expr("mul", Expr("add", "x", 2), "y"))], {}, "") == \
        ["z = (x + 2) * y"]
    rng = random.Random(0)
    for _ in range(300):
        tree = _random_tree(rng, 4)
        statements = [("z", tree)]
        for x, y in itertools.product((3, 17), (5, 40)):
            try:
                want = tr.evaluate(IntArith(), statements, {"x": x, "y": y})["z"]
            except ZeroDivisionError:
                continue
            assert _run(tr.render(statements, {}, "", minf="min"), x=x, y=y)["z"] == want


def test_constants_fold_before_the_arithmetic_sees_them() -> None:
    """The cpu lowering's builder sees a folded band size (one constant, no instruction)."""
    calls: list[str] = []

    class Recording(IntArith):
        def mul(self, a: int, b: int) -> int:
            calls.append("mul")
            return a * b

    env = tr.evaluate(Recording(), [("k", Expr("mul", 3, 4)), ("z", Expr("mul", "x", "k"))],
                      {"x": 5})
    assert env["k"] == 12 and env["z"] == 60 and calls == ["mul"]


def test_invalid_groups_rejected_by_both_renderings() -> None:
    with pytest.raises(ValueError, match="positive"):
        tr.grouped_lines("r", 3, 3, 0, 1, "row", "col", "g_")
    with pytest.raises(ValueError, match="positive"):
        tr.grouped_coords(IntArith(), 0, 3, 3, 1, 0)
