"""The TileIR op catalog: one declarative definition per op kind, with its type rule.

Other stages attach behaviour per op kind through their own registries (interpreter
rules, lowering rules, cost rules); this module owns only what an op *is*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilenest.errors import IRError
from tilenest.ir.core import Op
from tilenest.ir.dtypes import bool_
from tilenest.ir.types import INDEX, Dim, IndexType, TensorType, TileType


class VerifyError(IRError):
    """An op violates its definition: names the op, the expectation and the actual."""

    def __init__(self, op: Op | None, expected: str, actual: str = "") -> None:
        name = op.name if op is not None else "function"
        msg = f"'{name}': expected {expected}"
        if actual:
            msg += f", got {actual}"
        super().__init__(msg, loc=op.loc if op is not None else None)
        self.op = op


# Traits.
PURE = "pure"            # no effects; may be reordered, duplicated, fused
EFFECT = "effect"        # reads or writes memory
REGION = "region"        # owns a body region with a domain
TERMINATOR = "terminator"
ELEMENTWISE = "elementwise"
CARRIES = "carries"      # operands are initial carried values; results are final values


@dataclass(frozen=True)
class OpDef:
    name: str
    traits: frozenset[str]
    verify: Callable[[Op], None]
    summary: str = ""


OPS: dict[str, OpDef] = {}


def define(name: str, *traits: str, summary: str = "") -> Callable:
    def deco(fn: Callable[[Op], None]) -> Callable[[Op], None]:
        OPS[name] = OpDef(name, frozenset(traits), fn, summary)
        return fn

    return deco


def has_trait(op: Op, trait: str) -> bool:
    d = OPS.get(op.name)
    return d is not None and trait in d.traits


# ---------------------------------------------------------------------------- helpers


def _arity(op: Op, operands: int | None, results: int | None, regions: int = 0) -> None:
    if operands is not None and len(op.operands) != operands:
        raise VerifyError(op, f"{operands} operands", str(len(op.operands)))
    if results is not None and len(op.results) != results:
        raise VerifyError(op, f"{results} results", str(len(op.results)))
    if len(op.regions) != regions:
        raise VerifyError(op, f"{regions} regions", str(len(op.regions)))


def _tile(op: Op, i: int) -> TileType:
    t = op.operands[i].type
    if not isinstance(t, TileType):
        raise VerifyError(op, f"operand {i} to be a tile", str(t))
    return t


def _index(op: Op, i: int) -> None:
    if not isinstance(op.operands[i].type, IndexType):
        raise VerifyError(op, f"operand {i} to be an index", str(op.operands[i].type))


def _result_tile(op: Op, i: int = 0) -> TileType:
    t = op.results[i].type
    if not isinstance(t, TileType):
        raise VerifyError(op, f"result {i} to be a tile", str(t))
    return t


def _attr(op: Op, key: str) -> object:
    if key not in op.attrs:
        raise VerifyError(op, f"attribute '{key}'", "none")
    return op.attrs[key]


def _same_layout(op: Op, a: TileType, b: TileType, what: str) -> None:
    if not a.same_layout(b):
        raise VerifyError(op, f"{what} with identical dims", f"{a} vs {b}")


def _kinds(op: Op, t: TileType, kinds: frozenset[str]) -> None:
    if t.dtype.kind not in kinds:
        raise VerifyError(op, f"element type of kind {sorted(kinds)}", str(t.dtype))


NUMERIC = frozenset({"int", "uint", "float"})
FLOAT = frozenset({"float"})
INTEGRAL = frozenset({"int", "uint", "bool"})
ANY = frozenset({"int", "uint", "float", "bool"})

# ---------------------------------------------------------------------------- index ops

INDEX_BINARY = ("add", "sub", "mul", "floordiv", "mod", "min", "max")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _verify_index_const(op: Op) -> None:
    _arity(op, 0, 1)
    if not isinstance(_attr(op, "value"), int) or isinstance(op.attrs["value"], bool):
        raise VerifyError(op, "an integer 'value'", repr(op.attrs["value"]))
    if op.result.type != INDEX:
        raise VerifyError(op, "an index result", str(op.result.type))


define("index.const", PURE, summary="integer constant index")(_verify_index_const)


def _verify_index_binary(op: Op) -> None:
    _arity(op, 2, 1)
    _index(op, 0)
    _index(op, 1)
    if op.result.type != INDEX:
        raise VerifyError(op, "an index result", str(op.result.type))


for _name in INDEX_BINARY:
    define(f"index.{_name}", PURE, summary="exact integer index arithmetic (floor semantics)")(
        _verify_index_binary
    )


@define("index.cmp", PURE, summary="compare two indices into a rank-0 bool tile")
def _verify_index_cmp(op: Op) -> None:
    _arity(op, 2, 1)
    _index(op, 0)
    _index(op, 1)
    if _attr(op, "pred") not in COMPARISONS:
        raise VerifyError(op, f"pred in {COMPARISONS}", repr(op.attrs["pred"]))
    t = _result_tile(op)
    if t.rank != 0 or t.dtype != bool_:
        raise VerifyError(op, "tile<bool []>", str(t))


@define("index.to_tile", PURE, summary="an index as a rank-0 tile of a numeric type")
def _verify_index_to_tile(op: Op) -> None:
    _arity(op, 1, 1)
    _index(op, 0)
    if _result_tile(op).rank != 0:
        raise VerifyError(op, "a rank-0 result", str(op.result.type))


# ---------------------------------------------------------------------------- tile values


@define("full", PURE, summary="a tile with every element equal to 'value'")
def _verify_full(op: Op) -> None:
    _arity(op, 0, 1)
    v = _attr(op, "value")
    if not isinstance(v, (bool, int, float)):
        raise VerifyError(op, "a scalar 'value'", repr(v))
    _result_tile(op)


@define("arange", PURE, summary="0, 1, ... along the single dim of the result")
def _verify_arange(op: Op) -> None:
    _arity(op, 0, 1)
    t = _result_tile(op)
    if t.rank != 1:
        raise VerifyError(op, "a rank-1 result", str(t))
    _kinds(op, t, NUMERIC)


UNARY_KINDS: dict[str, frozenset[str]] = {
    "neg": NUMERIC,
    "abs": NUMERIC,
    "not": INTEGRAL,
    "exp": FLOAT,
    "log": FLOAT,
    "sqrt": FLOAT,
    "rsqrt": FLOAT,
    "tanh": FLOAT,
    "sigmoid": FLOAT,
}

BINARY_KINDS: dict[str, frozenset[str]] = {
    "add": NUMERIC,
    "sub": NUMERIC,
    "mul": NUMERIC,
    "div": FLOAT,
    "floordiv": NUMERIC,
    "mod": NUMERIC,
    "maximum": NUMERIC,
    "minimum": NUMERIC,
    "and": INTEGRAL,
    "or": INTEGRAL,
    "xor": INTEGRAL,
}


def _verify_unary(op: Op) -> None:
    _arity(op, 1, 1)
    a = _tile(op, 0)
    _kinds(op, a, UNARY_KINDS[op.name])
    if _result_tile(op) != a:
        raise VerifyError(op, f"result type {a}", str(op.result.type))


def _verify_binary(op: Op) -> None:
    _arity(op, 2, 1)
    a, b = _tile(op, 0), _tile(op, 1)
    if a != b:
        raise VerifyError(op, "operands of one type", f"{a} and {b}")
    _kinds(op, a, BINARY_KINDS[op.name])
    if _result_tile(op) != a:
        raise VerifyError(op, f"result type {a}", str(op.result.type))


def _verify_compare(op: Op) -> None:
    _arity(op, 2, 1)
    a, b = _tile(op, 0), _tile(op, 1)
    if a != b:
        raise VerifyError(op, "operands of one type", f"{a} and {b}")
    r = _result_tile(op)
    if r != a.with_dtype(bool_):
        raise VerifyError(op, f"result type {a.with_dtype(bool_)}", str(r))


for _name in UNARY_KINDS:
    define(_name, PURE, ELEMENTWISE, summary="elementwise unary")(_verify_unary)
for _name in BINARY_KINDS:
    define(_name, PURE, ELEMENTWISE, summary="elementwise binary")(_verify_binary)
for _name in COMPARISONS:
    define(_name, PURE, ELEMENTWISE, summary="elementwise comparison")(_verify_compare)


@define("where", PURE, ELEMENTWISE, summary="select a where cond else b")
def _verify_where(op: Op) -> None:
    _arity(op, 3, 1)
    c, a, b = _tile(op, 0), _tile(op, 1), _tile(op, 2)
    if c.dtype != bool_:
        raise VerifyError(op, "a bool condition", str(c))
    _same_layout(op, c, a, "condition and values")
    if a != b:
        raise VerifyError(op, "values of one type", f"{a} and {b}")
    if _result_tile(op) != a:
        raise VerifyError(op, f"result type {a}", str(op.result.type))


@define("cast", PURE, ELEMENTWISE, summary="convert the element type")
def _verify_cast(op: Op) -> None:
    _arity(op, 1, 1)
    _same_layout(op, _tile(op, 0), _result_tile(op), "operand and result")


@define("broadcast", PURE, summary="relayout by dim identity: permute, expand, rename")
def _verify_broadcast(op: Op) -> None:
    _arity(op, 1, 1)
    src, dst = _tile(op, 0), _result_tile(op)
    if src.dtype != dst.dtype:
        raise VerifyError(op, f"element type {src.dtype}", str(dst.dtype))
    axes = _attr(op, "src_axes")
    if not isinstance(axes, tuple) or len(axes) != dst.rank:
        raise VerifyError(op, f"'src_axes' with {dst.rank} entries", repr(axes))
    used = [a for a in axes if a is not None]
    if len(set(used)) != len(used) or any(
        not isinstance(a, int) or not (0 <= a < src.rank) for a in used
    ):
        raise VerifyError(op, "distinct valid source axes", repr(axes))
    for r, a in enumerate(axes):
        if a is not None and src.shape[a] not in (1, dst.shape[r]):
            raise VerifyError(op, f"source axis {a} of extent 1 or {dst.shape[r]}", str(src))
    for a in range(src.rank):
        if a not in used and src.shape[a] != 1:
            raise VerifyError(op, f"dropped source axis {a} to have extent 1", str(src))


@define("extract", PURE, summary="one element as a rank-0 tile")
def _verify_extract(op: Op) -> None:
    if not op.operands:
        raise VerifyError(op, "a tile as operand 0")
    t = _tile(op, 0)
    _arity(op, 1 + t.rank, 1)
    for i in range(1, len(op.operands)):
        _index(op, i)
    r = _result_tile(op)
    if r.rank != 0 or r.dtype != t.dtype:
        raise VerifyError(op, f"tile<{t.dtype} []>", str(r))


@define("take", PURE, summary="the slice at one index along 'axis' (drops that axis)")
def _verify_take(op: Op) -> None:
    _arity(op, 2, 1)
    t = _tile(op, 0)
    _index(op, 1)
    axis = _attr(op, "axis")
    if not isinstance(axis, int) or not 0 <= axis < t.rank:
        raise VerifyError(op, f"axis in [0, {t.rank})", repr(axis))
    want = TileType(t.dtype, t.dims[:axis] + t.dims[axis + 1 :],
                    t.shape[:axis] + t.shape[axis + 1 :])
    if _result_tile(op) != want:
        raise VerifyError(op, f"result type {want}", str(op.result.type))


def mma_roles(a: TileType, b: TileType, c: TileType) -> tuple[list, list, list, list]:
    """Split the dims of an `mma` by identity: (batch, m-like, n-like, contracted).

    batch: in a, b and acc; m: in a and acc only; n: in b and acc only; contracted: in a
    and b but not acc. Raises ValueError when a dim fits none of the roles.
    """
    batch, ms, ns, ks = [], [], [], []
    for d in a.dims:
        in_b, in_c = b.axis_of(d) is not None, c.axis_of(d) is not None
        if in_b and in_c:
            batch.append(d)
        elif in_c:
            ms.append(d)
        elif in_b:
            ks.append(d)
        else:
            raise ValueError(f"dim {d.describe()} of the left operand is neither in the "
                             "right operand nor in the accumulator")
    for d in b.dims:
        if a.axis_of(d) is None:
            if c.axis_of(d) is None:
                raise ValueError(f"dim {d.describe()} of the right operand is neither in the "
                                 "left operand nor in the accumulator")
            ns.append(d)
    for d in c.dims:
        if a.axis_of(d) is None and b.axis_of(d) is None:
            raise ValueError(f"accumulator dim {d.describe()} is in neither operand")
    if len(ks) != 1:
        raise ValueError(f"expected exactly one contracted dim, found {len(ks)}")
    return batch, ms, ns, ks


@define("mma", PURE, summary="acc + a @ b contracting the dim a and b share and acc lacks")
def _verify_mma(op: Op) -> None:
    _arity(op, 3, 1)
    a, b, c = _tile(op, 0), _tile(op, 1), _tile(op, 2)
    try:
        mma_roles(a, b, c)
    except ValueError as e:
        raise VerifyError(op, "operands whose dims match by identity", str(e)) from None
    for t in (a, b):
        for d, e in zip(t.dims, t.shape, strict=True):
            other = c if c.axis_of(d) is not None else (b if t is a else a)
            if other.extent_of(d) != e:
                raise VerifyError(op, f"dim {d.describe()} of one extent", f"{e} vs "
                                  f"{other.extent_of(d)}")
    if not (a.dtype.kind in NUMERIC and b.dtype.kind in NUMERIC):
        raise VerifyError(op, "numeric operands", f"{a.dtype}, {b.dtype}")
    if _result_tile(op) != c:
        raise VerifyError(op, f"result type {c}", str(op.result.type))


# ---------------------------------------------------------------------------- memory


def _verify_region_attr(op: Op, tensor: TensorType) -> tuple[int, ...]:
    shape = _attr(op, "shape")
    if not isinstance(shape, tuple) or len(shape) != tensor.rank:
        raise VerifyError(op, f"'shape' with one entry per tensor axis ({tensor.rank})",
                          repr(shape))
    kept = tuple(e for e in shape if e is not None)
    if any((not isinstance(e, int)) or e < 0 for e in kept):
        raise VerifyError(op, "non-negative extents", repr(shape))
    return kept


@define("load", EFFECT, summary="snapshot of a tensor region; out-of-bounds reads 'fill'")
def _verify_load(op: Op) -> None:
    if not op.operands or not isinstance(op.operands[0].type, TensorType):
        raise VerifyError(op, "a tensor as operand 0")
    tensor = op.operands[0].type
    _arity(op, 1 + tensor.rank, 1)
    for i in range(1, len(op.operands)):
        _index(op, i)
    kept = _verify_region_attr(op, tensor)
    r = _result_tile(op)
    if r.shape != kept or r.dtype != tensor.dtype:
        raise VerifyError(op, f"tile<{tensor.dtype}> of shape {kept}", str(r))
    if not isinstance(_attr(op, "fill"), (bool, int, float)):
        raise VerifyError(op, "a scalar 'fill'", repr(op.attrs["fill"]))


@define("store", EFFECT, summary="write a tile into a tensor region (in-bounds elements)")
def _verify_store(op: Op) -> None:
    if not op.operands or not isinstance(op.operands[0].type, TensorType):
        raise VerifyError(op, "a tensor as operand 0")
    tensor = op.operands[0].type
    _arity(op, 2 + tensor.rank, 0)
    for i in range(1, 1 + tensor.rank):
        _index(op, i)
    kept = _verify_region_attr(op, tensor)
    t = _tile(op, 1 + tensor.rank)
    if t.shape != kept:
        raise VerifyError(op, f"a stored tile of shape {kept}", str(t))
    if t.dtype != tensor.dtype:
        raise VerifyError(op, f"a stored tile of type {tensor.dtype}", str(t.dtype))


# ---------------------------------------------------------------------------- regions

REDUCE_ORDERS = ("unordered_tree", "ordered_tree", "fold_left", "fold_right")
EXEC_POLICIES = ("block", "warp", "subgroup", "thread", "core", "vector", "cluster", "infer")


def _verify_domain(op: Op) -> tuple:
    domain = _attr(op, "domain")
    if not isinstance(domain, tuple):
        raise VerifyError(op, "a 'domain' tuple of (dim, extent)", repr(domain))
    for entry in domain:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Dim)
                and isinstance(entry[1], int) and entry[1] >= 0):
            raise VerifyError(op, "domain entries (dim, extent >= 0)", repr(entry))
    return domain


def _verify_carrying_region(op: Op) -> None:
    """Body args: one index per domain axis, then one per carried value."""
    domain = _verify_domain(op)
    _arity(op, None, len(op.operands), regions=1)
    body = op.body
    n = len(domain)
    if len(body.args) != n + len(op.operands):
        raise VerifyError(op, f"{n + len(op.operands)} region arguments", str(len(body.args)))
    for a in body.args[:n]:
        if a.type != INDEX:
            raise VerifyError(op, "index region arguments for the domain", str(a.type))
    for i, (init, arg, res) in enumerate(zip(op.operands, body.args[n:], op.results,
                                             strict=True)):
        if not (init.type == arg.type == res.type) or not isinstance(init.type, TileType):
            raise VerifyError(op, f"carry {i} of one tile type",
                              f"{init.type}, {arg.type}, {res.type}")
    term = body.terminator
    if term is None:
        raise VerifyError(op, "a body ending in 'yield'")
    if len(term.operands) != len(op.operands):
        raise VerifyError(op, f"yield of {len(op.operands)} values", str(len(term.operands)))
    for i, (v, res) in enumerate(zip(term.operands, op.results, strict=True)):
        if v.type != res.type:
            raise VerifyError(op, f"yielded value {i} of type {res.type}", str(v.type))


@define("parallel", REGION, summary="independent child instances over a domain")
def _verify_parallel(op: Op) -> None:
    if op.operands or op.results:
        raise VerifyError(op, "no operands and no results (instances are independent)")
    _verify_carrying_region(op)
    policy = op.attrs.get("policy")
    if policy is not None and policy not in EXEC_POLICIES and not (
        isinstance(policy, tuple) and policy and policy[0] == "layout"
    ):
        raise VerifyError(op, f"policy in {EXEC_POLICIES} or ('layout', ...)", repr(policy))


@define("serial", REGION, CARRIES, summary="a totally ordered loop with carried values")
def _verify_serial(op: Op) -> None:
    _verify_carrying_region(op)


@define("pipeline", REGION, CARRIES, summary="a loop whose iterations may overlap by stage")
def _verify_pipeline(op: Op) -> None:
    _verify_carrying_region(op)
    for key in ("window", "interval"):
        v = _attr(op, key)
        if not isinstance(v, int) or v < 1:
            raise VerifyError(op, f"'{key}' >= 1", repr(v))


@define("reduce", REGION, CARRIES, summary="a fold of contributions into reduction states")
def _verify_reduce(op: Op) -> None:
    _verify_carrying_region(op)
    if _attr(op, "order") not in REDUCE_ORDERS:
        raise VerifyError(op, f"order in {REDUCE_ORDERS}", repr(op.attrs["order"]))


@define("map", REGION, summary="a custom scalar function lifted over tiles of one layout")
def _verify_map(op: Op) -> None:
    _arity(op, None, None, regions=1)
    if not op.operands:
        raise VerifyError(op, "at least one operand")
    first = _tile(op, 0)
    for i in range(1, len(op.operands)):
        _same_layout(op, first, _tile(op, i), "operands")
    body = op.body
    if len(body.args) != len(op.operands):
        raise VerifyError(op, f"{len(op.operands)} region arguments", str(len(body.args)))
    for v, a in zip(op.operands, body.args, strict=True):
        if a.type != TileType(v.type.dtype, (), ()):
            raise VerifyError(op, f"rank-0 argument of {v.type.dtype}", str(a.type))
    term = body.terminator
    if term is None or len(term.operands) != len(op.results):
        raise VerifyError(op, f"a body yielding {len(op.results)} values")
    for v, r in zip(term.operands, op.results, strict=True):
        rt = r.type
        if not isinstance(rt, TileType) or not rt.same_layout(first):
            raise VerifyError(op, "results with the operands' dims", str(rt))
        if v.type != TileType(rt.dtype, (), ()):
            raise VerifyError(op, f"a rank-0 yield of {rt.dtype}", str(v.type))
    for inner in body.walk():
        if not has_trait(inner, PURE) or inner.regions:
            if inner.name != "yield":
                raise VerifyError(inner, "only pure scalar ops inside 'map'")


@define("stage", summary="begins the named stage of the enclosing pipeline")
def _verify_stage(op: Op) -> None:
    _arity(op, 0, 0)
    if not isinstance(_attr(op, "name"), str):
        raise VerifyError(op, "a string 'name'")
    parent = op.parent.parent if op.parent is not None else None
    if parent is None or parent.name != "pipeline":
        raise VerifyError(op, "to be directly inside a 'pipeline'")


@define("yield", TERMINATOR, summary="ends a region, passing carried values or map results")
def _verify_yield(op: Op) -> None:
    _arity(op, None, 0)
