"""Deterministic combining stores on cuda: a workspace and a second phase in instance order.

A `store(t, combine="add", contract="deterministic")` of floats must give the same bits on
every run, and the reference's forward order defines which: the contributions of the
instances of its root `parallel`, in lexicographic instance order. Atomics cannot fix an
order, so the parallel runs in two phases (sequential launches):

- "contribute": the parallel as written, except that the combining store writes its padded
  block into a workspace slot [group, contribution] instead of the tensor;
- "combine": one program per group reads the tensor's region once, adds the contributions
  in order (`acc = acc + c`, rounded to the tensor's dtype each time, as the reference
  does) and stores the region, masked like the original store.

Groups and contributions come from the store's origin. Each origin index must be an affine
function of the root coordinates (index constants, +, -, and products by constants): the
root axes that appear in some origin are the group axes, the others index the
contributions (the instances that write one region, which differ only in those axes, are
ordered among themselves exactly as in the forward order). Distinct groups must write
disjoint regions, which is proved when each group axis owns one origin index of the form
`a * coord + b` with |a| at least the region's extent there. The store must be at the top
level of the parallel body and its last memory effect (a later load of the same instance
would otherwise miss its own contribution). Anything else fails closed with a TileError
that names the missing condition. A deterministic float-add combining scatter has no
such realization (its positions are data, never provably disjoint) and fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilenest.backends.cuda.emitter import Emitter, Idx, tl_dtype
from tilenest.backends.cuda.resources import BlockLayout
from tilenest.errors import BackendError
from tilenest.ir import ops
from tilenest.ir.core import Function, Op, Value
from tilenest.ir.ops import EFFECT, has_trait
from tilenest.ir.types import TileType


@dataclass(frozen=True)
class CombineSite:
    parallel: ops.Parallel
    store: ops.Store
    groups: tuple[int, ...]    # root axes in the origin: the combine phase's programs
    folded: tuple[int, ...]    # root axes absent from it: the contributions, in order
    slice_ops: tuple[Op, ...]  # the parallel body's ops that compute the origin
    block: int                 # elements of the padded stored block (a workspace slot)
    element_bytes: int

    def extent(self, axes: tuple[int, ...]) -> int:
        n = 1
        for a in axes:
            n *= int(self.parallel.extents[a])  # type: ignore[arg-type]
        return n

    @property
    def group_programs(self) -> int:
        return self.extent(self.groups)

    @property
    def contributions(self) -> int:
        return self.extent(self.folded)

    @property
    def workspace_words(self) -> int:
        """f32 words of the workspace (the launcher allocates f32)."""
        total = self.group_programs * self.contributions * self.block * self.element_bytes
        return -(-total // 4)


Affine = tuple[dict[int, int], int]  # ({root axis: coefficient}, constant)


def _affine(v: Value, coords: list[Value], slice_ops: list[Op]) -> Affine | None:
    if v in coords:
        return {coords.index(v): 1}, 0
    op = v.owner
    if isinstance(op, ops.IndexConst):
        slice_ops.append(op)
        return {}, int(op.value)
    if not isinstance(op, (ops.IndexAdd, ops.IndexSub, ops.IndexMul)):
        return None
    a = _affine(op.lhs, coords, slice_ops)
    b = _affine(op.rhs, coords, slice_ops)
    if a is None or b is None:
        return None
    slice_ops.append(op)
    (ta, ca), (tb, cb) = a, b
    if isinstance(op, ops.IndexMul):
        if ta and tb:
            return None
        terms, scale = (ta, cb) if ta else (tb, ca)
        return {k: c * scale for k, c in terms.items()}, ca * cb
    sign = -1 if isinstance(op, ops.IndexSub) else 1
    out = dict(ta)
    for k, c in tb.items():
        out[k] = out.get(k, 0) + sign * c
    return {k: c for k, c in out.items() if c}, ca + sign * cb


def combine_site(fn: Function, par: ops.Parallel, layout: BlockLayout
                 ) -> CombineSite | str | None:
    """The workspace realization of `par`'s deterministic float-add store; None when it has
    none; a string saying why it cannot be realized."""
    ordered = [s for s in par.body.walk() if isinstance(s, ops.Store) and s.needs_order]
    if not ordered:
        return None
    store = ordered[0]
    if len(ordered) > 1:
        return "one deterministic float-add combining store per root parallel (found " \
               f"{len(ordered)})"
    if par.is_dynamic:
        return "a root parallel with a static domain"
    body = par.body.ops
    if store not in body:
        return "the store at the top level of the parallel body (not inside a loop)"
    later = body[body.index(store) + 1:]
    if any(has_trait(op, EFFECT) or op.regions for op in later):
        return "the store as the last memory effect of the parallel body"
    coords = list(par.coords)
    slice_ops: list[Op] = []
    forms = []
    for v in store.indices:
        form = _affine(v, coords, slice_ops)
        if form is None:
            return ("an origin affine in the parallel's coordinates (index constants, +, -, "
                    "products by constants; no loaded or data-dependent origin)")
        forms.append(form[0])
    used = sorted({k for f in forms for k in f})
    owned: set[int] = set()
    for axis, (form, e) in enumerate(zip(forms, store.shape, strict=True)):
        if len(form) > 1:
            return ("each origin index a function of at most one coordinate (origin index "
                    f"{axis} reads {len(form)})")
        if form:
            (k, c), = form.items()
            if k in owned or abs(c) < (1 if e is None else e):
                return ("regions of distinct instances either equal or disjoint: each "
                        "coordinate in one origin index, scaled by at least the region's "
                        f"extent (origin index {axis})")
            owned.add(k)
    folded = tuple(k for k in range(len(coords)) if k not in used)
    t = store.value.type
    assert isinstance(t, TileType)
    block = 1
    for e in layout.shape(t):
        block *= e
    in_body = {id(op) for op in body}
    ordered_slice = tuple(op for op in body if id(op) in {id(o) for o in slice_ops}
                          and id(op) in in_body)
    return CombineSite(par, store, tuple(used), folded, ordered_slice, block,
                       max(1, t.dtype.bits // 8))


def combine_sites(fn: Function, layout: BlockLayout) -> dict[ops.Parallel, CombineSite]:
    """Every root parallel's workspace realization; BackendError when one is needed and the
    store does not qualify."""
    out: dict[ops.Parallel, CombineSite] = {}
    for par in fn.body.ops:
        if not isinstance(par, ops.Parallel):
            continue
        scatter = next((s for s in par.body.walk() if isinstance(s, ops.Scatter)
                        and s.needs_order), None)
        if scatter is not None:
            raise BackendError(
                "the cuda backend has no realization of this scatter(..., combine=\"add\", "
                "contract=\"deterministic\") of floats: fixing the order of its "
                "contributions needs a workspace of provably disjoint regions, and a "
                "scatter's data-dependent positions are never provably disjoint; use "
                "contract=\"unordered\" (atomics) or the cpu backend (instance order)",
                loc=scatter.loc)
        site = combine_site(fn, par, layout)
        if isinstance(site, str):
            store = next(s for s in par.body.walk() if isinstance(s, ops.Store)
                         and s.needs_order)
            raise BackendError(
                "the cuda backend has no realization of this store(..., combine=\"add\", "
                "contract=\"deterministic\") of floats: its ordered realization (a "
                f"workspace and a combine phase in instance order) needs {site}; use "
                "contract=\"unordered\" (atomics) or restructure the store", loc=store.loc)
        if site is not None:
            out[par] = site
    return out


# ------------------------------------------------------------------ emission


@dataclass(frozen=True)
class CombineEmit:
    """The kernel being emitted is the "contribute" phase of `site`."""

    site: CombineSite


def _ordinal(em: Emitter, axes: tuple[int, ...], site: CombineSite) -> str:
    """Row-major ordinal of the coordinates along `axes` (as bound in the emitter)."""
    expr = "0"
    for a in axes:
        c = em.idx(site.parallel.coords[a]).expr
        e = site.parallel.extents[a]
        expr = c if expr == "0" else f"({expr}) * {e} + {c}"
    return expr


def _slot_pointers(em: Emitter, site: CombineSite, group: str, contribution: str,
                   padded: tuple[int, ...]) -> str:
    from tilenest.backends.cuda.splitk import _flat_offsets

    tl_t = tl_dtype(site.store.tensor.type.dtype)
    base = em.assign(f"(({group}) * {site.contributions} + {contribution}) * {site.block}",
                     "cws")
    flat = _flat_offsets(em, padded)
    return f"TN_WS.to(tl.pointer_type({tl_t}), bitcast=True) + {base} + ({flat})"


def emit_contribution(em: Emitter, op: ops.Store, site: CombineSite) -> None:
    """The "contribute" phase's store: the whole padded block into the instance's slot."""
    value = em.block(op.value)
    ptrs = _slot_pointers(em, site, _ordinal(em, site.groups, site),
                          _ordinal(em, site.folded, site), value.padded)
    em.emit(f"tl.store({ptrs}, {value.name})")


def emit_combine_kernel(fn: Function, name: str, facts: Any, errors: list[str],
                        site: CombineSite) -> tuple[list[str], Any]:
    """The "combine" phase: one program per group, the contributions added in order."""
    from tilenest.backends.cuda.lower import Phase, _is_pure_root, _signature
    from tilenest.backends.cuda.rules import lower_op
    from tilenest.backends.cuda.rules_memory import _origins, access

    params = {p.value: f"A_{p.name}" for p in fn.params}
    em = Emitter(fn, facts, params, errors)
    for op in fn.body.ops:
        if _is_pure_root(op) and all(v in em.env or v.owner is None for v in op.operands):
            lower_op(em, op)
    par = site.parallel
    em.emit("pid = tl.program_id(0).to(tl.int64)")
    rest = "pid"
    for k in reversed(site.groups):
        e = par.extents[k]
        c = em.assign(f"{rest} % {e}", f"g{k}_")
        rest = em.assign(f"{rest} // {e}", "r")
        em.env[par.coords[k]] = Idx(c, 0, max(0, int(e) - 1))  # type: ignore[arg-type]
    for k in site.folded:
        em.env[par.coords[k]] = Idx("0", 0, 0)
    for op in site.slice_ops:
        lower_op(em, op)
    store = site.store
    tensor = em.tensor_type(store.tensor)
    t = store.value.type
    assert isinstance(t, TileType)
    padded = em.padded(t)
    acc = access(em, store, tensor, _origins(em, store), store.shape, t)
    tl_t = tl_dtype(tensor.dtype)
    total = em.assign("tl.load(" + acc.pointers + (f", mask={acc.mask}, other=0.0)"
                                                   if acc.mask else ")"), "acc")
    total = em.assign(f"({total}).to({tl_t})", "acc")
    group = _ordinal(em, site.groups, site)
    s = em.fresh("s")
    em.emit(f"for {s} in range(0, {site.contributions}):")
    with em.indented():
        ptrs = _slot_pointers(em, site, group, s, padded)
        em.emit(f"{total} = ({total} + tl.load({ptrs})).to({tl_t})")
    mask = f", mask={acc.mask}" if acc.mask else ""
    em.emit(f"tl.store({acc.pointers}, {total}{mask})")
    head = ["@triton.jit", f"def {name}({_signature(fn, params, True)}):"]
    return head + em.lines, Phase(name, site.group_programs, em.uses_status)
