"""The data-dependent families of the H200 suite (issue 13): `jagged` (jagged mean over int32
offsets) and `moe` (a top-2 MoE layer on a precomputed routing). cuda_cases.py registers them
(`register`), so they run, list and plan like its own families:

    PYTHONPATH=src:. python -m benchmarks.cuda_suite --only jagged,moe [--out DIR]
    PYTHONPATH=src:. python -m benchmarks.cuda_dynamic [--plan-only | --list | --out DIR]

(the second is the first with `--only jagged,moe` unless another `--only` is given). Causal
attention is cuda_suite's `attention` family.

- jagged: tilenest's plain call against `torch.segment_reduce` and `index_add_` over the real
  rows (segment ids precomputed), and a copy of as many bytes as the real ones (the N rows
  read and the B means written): its GB/s is the bandwidth line. Segment lengths are random
  with some empty segments, so the padded form (B x the longest) would move several times
  the real bytes.
- moe: tilenest's plain call (grouped GEMM with the gather, combine) against torch eager on the
  same routing: `index_select` of the rows, one matmul per expert over its rows (the per-expert
  row offsets read on the host once, as routing metadata), the gates applied and `index_add_`
  back. FLOP/s count the real 2 x 2T x D x F of the expert products.

torch is imported inside the functions that use it: the module imports without it, and the
torch helpers run on CPU tensors (tests/e2e/test_cuda_dynamic_bench.py checks them against
the examples' float64 oracles, and the `--plan-only` path, on a machine without a GPU).
"""

from __future__ import annotations

import math
import sys
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np

from tilenest.examples import jagged

# (dtype, B segments, N rows in all, D columns); (dtype, T tokens, D, F, E experts)
JAGGED_SHAPES = (("bf16", 1024, 524288, 512), ("f32", 4096, 262144, 256))
MOE_SHAPES = (("bf16", 4096, 4096, 14336, 8), ("bf16", 8192, 2048, 1408, 64))
DEVICE = "cuda"  # where the cases' tensors live (the tests build them on "cpu")


def register(suite: ModuleType) -> None:
    """Add the families to the suite's tables (`suite` is benchmarks.cuda_cases)."""
    suite.SPECS.update(
        jagged=[suite.Spec("jagged", "jagged_mean", dt, {"B": b, "N": n, "D": d})
                for dt, b, n, d in JAGGED_SHAPES],
        moe=[suite.Spec("moe", "moe", dt, {"T": t, "D": d, "F": f, "E": e})
             for dt, t, d, f, e in MOE_SHAPES])
    suite.BUILDERS.update(jagged=partial(jagged_case, suite), moe=partial(moe_case, suite))


# ------------------------------------------------------------------ torch baselines (any device)


def segment_ids(offsets: Any) -> tuple[Any, Any]:
    """(the segment of each row, the rows of each segment) for non-decreasing offsets."""
    import torch

    lengths = (offsets[1:] - offsets[:-1]).long()
    ids = torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device), lengths)
    return ids, lengths


def torch_jagged_mean_index_add(x: Any, ids: Any, lengths: Any) -> Any:
    import torch

    acc = torch.promote_types(x.dtype, torch.float32)
    sums = torch.zeros(lengths.numel(), x.shape[1], device=x.device, dtype=acc)
    sums.index_add_(0, ids, x.to(acc))
    return (sums / lengths.clamp_min(1)[:, None]).to(x.dtype)


def torch_jagged_mean_segment_reduce(x: Any, offsets: Any) -> Any:
    import torch

    return torch.segment_reduce(x, "mean", offsets=offsets, axis=0, initial=0)


def torch_routing(logits: Any) -> dict[str, Any]:
    """The routing arrays of `tilenest.examples.moe` computed with torch (the rule of its numpy
    `route`, ties apart: top-2 of the logits, the softmax of the two as gates, a stable sort of
    the (token, slot) pairs by expert)."""
    import torch

    T, E = logits.shape
    picked, top = torch.topk(logits, 2, dim=1)
    gate = torch.softmax(picked, dim=1).reshape(-1)
    order = torch.sort(top.reshape(-1), stable=True).indices          # sorted row -> slot
    pos = torch.empty_like(order)
    pos[order] = torch.arange(2 * T, device=logits.device)
    counts = torch.bincount(top.reshape(-1), minlength=E)
    eoff = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return {"Tok": (order // 2).int(), "Eoff": eoff.int(), "Gate": gate, "Pos": pos.int()}


def sorted_gates(routing: dict[str, Any]) -> Any:
    """Gate[s] moved to the sorted row Pos[s] of its slot."""
    import torch

    out = torch.empty_like(routing["Gate"])
    out[routing["Pos"].long()] = routing["Gate"]
    return out


def torch_moe_eager(x: Any, w: Any, tok: Any, bounds: list[int], gates: Any) -> Any:
    """index_select, one matmul per expert over its rows, the gates, index_add_ back."""
    import torch

    rows = x.index_select(0, tok)
    out = torch.empty(rows.shape[0], w.shape[2], device=x.device, dtype=x.dtype)
    for e in range(w.shape[0]):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            torch.mm(rows[lo:hi], w[e], out=out[lo:hi])
    y = torch.zeros(x.shape[0], w.shape[2], device=x.device, dtype=torch.float32)
    y.index_add_(0, tok, out.float() * gates.float()[:, None])
    return y.to(x.dtype)


# ----------------------------------------------------------------------------------- cases


def jagged_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    dtype, B, N, D = spec.dtype, spec.shape["B"], spec.shape["N"], spec.shape["D"]
    dt = suite.DT[dtype]
    real = (N + B) * D * dt.itemsize
    case = suite.Case(f"jagged_mean {dtype} B{B} N{N} D{D}", "jagged", 0.0, real)
    rng = np.random.default_rng(0)
    sets = []
    for _ in range(2):
        off = torch.from_numpy(jagged.draw_offsets(rng, B, N)).to(DEVICE)
        sets.append((torch.randn(N, D, device=DEVICE, dtype=dt), off, *segment_ids(off)))
    refs = [torch_jagged_mean_index_add(x.double(), ids, n) for x, _, ids, n in sets]
    case.check = lambda out, i: suite.rel_err(out, refs[i])
    case.tol = suite.TOL[dt]
    longest = max(int(n.max()) for *_, n in sets)
    log.append(f"{case.name}: longest segment {longest} rows, padded {B * longest} rows "
               f"({B * longest / N:.1f}x the real ones)")

    suite._plain_call(case, spec, lambda i, o: [sets[i][0], sets[i][1], o],
                      torch.empty(B, D, device=DEVICE, dtype=dt), log)
    box: dict[str, Any] = {}

    def run(i: int, key: str) -> None:
        x, off, ids, n = sets[i]
        box[key] = torch_jagged_mean_segment_reduce(x, off) if key == "segment_reduce" else \
            torch_jagged_mean_index_add(x, ids, n)

    for key in ("segment_reduce", "index_add"):
        case.contenders[f"torch {key}"] = (partial(run, key=key), partial(box.get, key))
    copy_contender(case, real, dt, "copy of the real bytes (bandwidth ceiling)")
    return case


def copy_contender(case: Any, nbytes: int, dt: Any, label: str) -> None:
    """A device copy moving `nbytes` in all (read plus write, two rotating sources): the
    bandwidth line of a memory-bound case."""
    import torch

    sources = [torch.empty(nbytes // 2 // dt.itemsize, device=DEVICE, dtype=dt).normal_()
               for _ in range(2)]
    copy = torch.empty_like(sources[0])
    case.contenders[label] = (lambda i: copy.copy_(sources[i]), lambda: None)


def moe_case(suite: ModuleType, spec: Any, log: list[str]) -> Any:
    import torch

    dtype, T, D, F, E = (spec.dtype, *(spec.shape[k] for k in ("T", "D", "F", "E")))
    dt = suite.DT[dtype]
    flops = 2.0 * 2 * T * D * F
    case = suite.Case(f"moe {dtype} T{T} D{D} F{F} E{E}", "moe", flops,
                      (E * D * F + T * D + T * F) * dt.itemsize)
    w = (torch.randn(E, D, F, device=DEVICE, dtype=torch.float32) / math.sqrt(D)).to(dt)
    sets = []
    for _ in range(2):
        logits = torch.randn(T, E, device=DEVICE) + 2.0 * torch.randn(E, device=DEVICE)
        routing = torch_routing(logits)
        routing["Gate"] = routing["Gate"].to(dt)
        sets.append((torch.randn(T, D, device=DEVICE, dtype=dt), routing,
                     routing["Eoff"].tolist(), sorted_gates(routing)))
    sample = torch.randperm(T, device=DEVICE)[:64]
    refs = [_moe_reference(x, w, r, sample) for x, r, _, _ in sets]
    case.check = lambda out, i: suite.rel_err(out[sample], refs[i])
    case.tol = suite.TOL[dt]
    rows = torch.empty(2 * T, F, device=DEVICE, dtype=dt)  # S: one row per (token, slot)

    def args(i: int, out: Any) -> list[Any]:
        x, r, _, _ = sets[i]
        return [x, w, r["Tok"], r["Eoff"], r["Gate"], r["Pos"], rows, out]

    suite._plain_call(case, spec, args, torch.empty(T, F, device=DEVICE, dtype=dt), log)
    box: dict[str, Any] = {}

    def eager(i: int) -> None:
        x, r, bounds, gates = sets[i]
        box["eager"] = torch_moe_eager(x, w, r["Tok"].long(), bounds, gates)

    case.contenders["torch eager (index_select, per-expert mm, index_add_)"] = (
        eager, lambda: box["eager"])
    return case


def _moe_reference(x: Any, w: Any, routing: dict[str, Any], tokens: Any) -> Any:
    """Y at the sampled tokens in float64, one expert's weights converted at a time."""
    import torch

    eoff = routing["Eoff"].long()
    out = torch.zeros(tokens.numel(), w.shape[2], device=x.device, dtype=torch.float64)
    for k in range(2):
        slots = 2 * tokens + k
        rows = routing["Pos"].long()[slots]
        experts = torch.searchsorted(eoff, rows, right=True) - 1
        gate = routing["Gate"].double()[slots]
        for e in experts.unique().tolist():
            mine = experts == e
            out[mine] += gate[mine, None] * (x[tokens[mine]].double() @ w[e].double())
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks import cuda_suite

    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--only" or a.startswith("--only=") for a in argv):
        argv = ["--only", "jagged,moe", *argv]
    return cuda_suite.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
