"""Host time per call of tiny kernels as a user calls them, with baselines in the same process
(issue 11, item 2: <= 3 µs per call on the 2-core CPU, <= 1.2x `torch.add(out=)` on the
H200), and the cold / warm compile time of the seed GEMM.

Cases: a 4096-element f32 add `O = X + Y` with its tile size left to the planner, the same add
as one block (BLOCK=4096: one program, one ctypes call), on strided offset views (cpu), on
torch CPU tensors (cpu), and a 2-D rows kernel
(`Y = X * 2 + 1` over 64 x 96 rows). Contenders, each checked against a float64 oracle before
it is timed:

- `tilenest call`: `k(x, y, o)` (binds, finds the specialization, runs);
- `tilenest compiled`: `ck(x, y, o)` of `ck = k.compile(x, y, o)`;
- `tilenest binder`: `binder_for(ck)((x, y, o))`, the fast path alone (what `ck(...)` costs
  once the driver calls it first; tiered up to the native binder where it has one, cpu numpy
  arguments with an inline launch: `runtime.native_binder`);
- `tilenest python binder` (cpu, where a native binder exists): `binder_for(ck, native=False)`,
  the generated Python binder that serves the first calls (the A/B of the native one);
- `tilenest compiled, triton launcher` (cuda): the same compiled call of a fresh kernel whose
  launches use Triton's launcher instead of torch's static one (the A/B of that choice);
- baselines: numpy `np.add(x, y, out=o)` and torch `torch.add(x, y, out=o)` on cpu; on cuda
  `torch.add(out=)` on CUDA tensors and a hand-written `@triton.jit` add launched through
  Triton's JIT.

Timing: rounds of N back-to-back calls, contenders interleaved round by round, the median
round reported per call. On cuda the host time is the wall time of the N calls without a
synchronization inside (one `torch.cuda.synchronize()` after them, not counted), and the
GPU-inclusive time counts up to the end of that synchronization.

Compile: `tilenest.examples.gemm` (its demo case, tunables open as a plain call leaves them)
compiled in a fresh Python process against an empty `TILENEST_CACHE_DIR` (cold) and again
against the directory the cold run filled (warm); medians of `--compile-repeats` processes.

    PYTHONPATH=src:. .venv/bin/python -m benchmarks.call_overhead [--target cpu|cuda] [--quick]

Writes `benchmarks/results/call-overhead-<target>-<stamp>.json` and `.md` (and
`call-overhead-<target>-latest.md`), prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import tilenest as tn
from benchmarks.harness import ForeignLoad, machine_info
from benchmarks.report import RESULTS_DIR, markdown_table
from tilenest.runtime.binder import binder_for

CPU_GOAL_US = 3.0
CUDA_GOAL_RATIO = 1.2  # x torch.add(out=) host time


@tn.kernel
def add(X, Y, O, *, BLOCK=tn.tunable(1024, 256, 512, 2048, 4096)):
    (N,) = X.shape
    for p in tn.parallel(tn.axis("g", tn.cdiv(N, BLOCK))):
        b = tn.axis("b", BLOCK)
        r = p.index() * BLOCK
        O.tile((r,), (b,)).store(X.tile((r,), (b,)).load() + Y.tile((r,), (b,)).load())


@tn.kernel
def scale_rows(X, Y, *, ROWS=tn.tunable(8, 1, 2, 4, 16)):
    M, N = X.shape
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for p in tn.parallel(tn.axis("g", tn.cdiv(M, ROWS))):
        r0 = p.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load()
        Y.tile((r0, 0), (r, c)).store(x * 2.0 + 1.0)


Call = Callable[[], Any]


class Case:
    """One kernel on one set of tensors: its contenders and the oracle of its output."""

    def __init__(self, label: str, kernel: tn.Kernel, args: list[Any], out: Any,
                 want: np.ndarray, consts: dict[str, Any]) -> None:
        self.label = label
        self.kernel = kernel
        self.args = args
        self.out = out
        self.want = want
        self.consts = consts
        self.contenders: dict[str, Call] = {}
        self.notes: list[str] = []
        self.picked: dict[str, Any] = {}
        self.tiers: list[Any] = []  # the native binder tiers of its binders (cpu)

    def add_tilenest(self, target: str) -> None:
        k, args, consts = self.kernel, self.args, self.consts
        self.contenders["tilenest call"] = lambda: k(*args, **consts)
        ck = k.compile(*args, target=target, **consts)
        self.contenders["tilenest compiled"] = lambda: ck(*args)
        fast = binder_for(ck)
        if fast is None:
            self.notes.append(f"{self.label}: no fast binder for this {target} executable")
        else:
            packed = tuple(args)
            self.contenders["tilenest binder"] = lambda: fast(packed) or _refused()
            tier = getattr(fast, "native", None)
            if tier is not None:
                python = binder_for(ck, native=False)
                self.contenders["tilenest python binder"] = lambda: python(packed) or _refused()
                self.tiers.append(tier)
        self.picked = dict(ck.constants)


def _refused() -> None:
    raise RuntimeError("the fast binder refused arguments of its own specialization")


def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, np.float64)


def check(case: Case, name: str, call: Call, sync: Callable[[], None]) -> str | None:
    """Poison the output, run once, compare with the float64 oracle (None: correct)."""
    try:
        if isinstance(case.out, np.ndarray):
            case.out.fill(np.nan)
        else:
            case.out.fill_(float("nan"))
        call()
        sync()
    except Exception as e:  # a contender that raises is reported, never hidden
        return f"{type(e).__name__}: {e}".splitlines()[0][:300]
    got = _as_numpy(case.out)
    err = float(np.max(np.abs(got - case.want)) / max(1e-30, float(np.max(np.abs(case.want)))))
    return None if err <= 1e-5 else f"max relative error {err:.3g}"


def time_rounds(contenders: dict[str, Call], calls: int, rounds: int,
                sync: Callable[[], None] | None) -> dict[str, dict[str, float]]:
    """Interleaved rounds of `calls` back-to-back calls; the median round per call (µs). With
    `sync` (cuda): host time excludes the final synchronization, `inclusive_us` includes it."""
    host: dict[str, list[float]] = {n: [] for n in contenders}
    inclusive: dict[str, list[float]] = {n: [] for n in contenders}
    cpu: dict[str, list[float]] = {n: [] for n in contenders}
    for call in contenders.values():  # warm-up: compile caches, pool workers, allocator
        for _ in range(min(50, calls)):
            call()
    if sync is not None:
        sync()
    for _ in range(rounds):
        for name, call in contenders.items():
            c0 = time.process_time()
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            t1 = time.perf_counter()
            cpu[name].append((time.process_time() - c0) / calls * 1e6)
            if sync is not None:
                sync()
            t2 = time.perf_counter()
            host[name].append((t1 - t0) / calls * 1e6)
            inclusive[name].append((t2 - t0) / calls * 1e6)
    out = {}
    for name in contenders:
        rec = {"host_us": statistics.median(host[name]), "min_us": min(host[name]),
               "samples_us": host[name], "process_cpu_us": statistics.median(cpu[name])}
        if sync is not None:
            rec["inclusive_us"] = statistics.median(inclusive[name])
        out[name] = rec
    return out


# ------------------------------------------------------------------------------------ cases


def _oracle_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) + y.astype(np.float64)


def cpu_cases(torch: Any | None) -> list[Case]:
    rng = np.random.default_rng(0)
    n = 4096
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    o = np.empty(n, np.float32)
    cases = []
    for label, consts in (("add 4096 (planned)", {}), ("add 4096 (1 block)", {"BLOCK": 4096})):
        case = Case(label, add, [x, y, o], o, _oracle_add(x, y), consts)
        case.add_tilenest("cpu")
        case.contenders["numpy"] = lambda: np.add(x, y, out=o)
        if torch is not None:
            xt, yt, ot = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(o)
            case.contenders["torch"] = lambda xt=xt, yt=yt, ot=ot: torch.add(xt, yt, out=ot)
        cases.append(case)
    # Offset, strided views of one buffer (every other element): a specialization of its own.
    buf = rng.standard_normal(6 * n + 3).astype(np.float32)
    xs, ys, os_ = buf[1:1 + 2 * n:2], buf[2 * n + 1:4 * n + 1:2], buf[4 * n + 3::2]
    case = Case("add 4096 (strided views)", add, [xs, ys, os_], os_, _oracle_add(xs, ys), {})
    case.add_tilenest("cpu")
    case.contenders["numpy"] = lambda: np.add(xs, ys, out=os_)
    cases.append(case)
    if torch is not None:  # the same add on torch CPU tensors
        xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        ot = torch.empty(n)
        case = Case("add 4096 (torch tensors)", add, [xt, yt, ot], ot, _oracle_add(x, y), {})
        case.add_tilenest("cpu")
        case.contenders["torch"] = lambda: torch.add(xt, yt, out=ot)
        cases.append(case)
    a = rng.standard_normal((64, 96)).astype(np.float32)
    b = np.empty_like(a)
    case = Case("rows 64x96", scale_rows, [a, b], b, a.astype(np.float64) * 2 + 1, {})
    case.add_tilenest("cpu")

    def numpy_rows() -> None:
        np.multiply(a, 2.0, out=b)
        np.add(b, 1.0, out=b)

    case.contenders["numpy"] = numpy_rows
    if torch is not None:
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
        case.contenders["torch"] = lambda: torch.add(at, at, out=bt).add_(1.0)
    cases.append(case)
    return cases


def _triton_add() -> Callable[..., Any] | None:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs,
                                                                           mask=mask),
                 mask=mask)

    def launch(x: Any, y: Any, o: Any) -> None:
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, o, n, BLOCK=1024)

    return launch


def _with_tritons_launcher(consts: dict[str, Any], *args: Any) -> Call | None:
    """The compiled add of a fresh kernel whose launches were primed with Triton's launcher
    (`TILENEST_CUDA_LAUNCHER=triton` within this process: the A/B of the static launcher),
    or None when the static launcher is not in use anyway."""
    from tilenest.backends.cuda import launcher

    if launcher.static_launcher() is None:
        return None
    saved, launcher._static = launcher._static, None
    try:
        ck = tn.kernel(add.fn).compile(*args, target="cuda", **consts)
        ck(*args)
        ck(*args)
    finally:
        launcher._static = saved
    return lambda: ck(*args)


def cuda_cases(torch: Any) -> list[Case]:
    n = 4096
    gen = torch.Generator(device="cpu").manual_seed(0)
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    want = _oracle_add(x.numpy(), y.numpy())
    xc, yc, oc = x.cuda(), y.cuda(), torch.empty(n, device="cuda")
    cases = []
    for label, consts in (("add 4096 (planned)", {}), ("add 4096 (1 block)", {"BLOCK": 4096})):
        case = Case(label, add, [xc, yc, oc], oc, want, consts)
        case.add_tilenest("cuda")
        triton_launched = _with_tritons_launcher(consts, xc, yc, oc)
        if triton_launched is not None:
            case.contenders["tilenest compiled, triton launcher"] = triton_launched
        case.contenders["torch"] = lambda: torch.add(xc, yc, out=oc)
        triton_add = _triton_add()
        if triton_add is not None:
            case.contenders["triton jit"] = lambda f=triton_add: f(xc, yc, oc)
        cases.append(case)
    a = torch.randn(64, 96, generator=gen)
    ac, bc = a.cuda(), torch.empty(64, 96, device="cuda")
    case = Case("rows 64x96", scale_rows, [ac, bc], bc, a.double().numpy() * 2 + 1, {})
    case.add_tilenest("cuda")
    case.contenders["torch"] = lambda: torch.add(ac, ac, out=bc).add_(1.0)
    cases.append(case)
    return cases


# ---------------------------------------------------------------------------------- compile

COMPILE_CHILD = r"""
import json, sys, time
import numpy as np
from tilenest.examples import EXAMPLES
target = sys.argv[1]
ex = EXAMPLES["gemm"]
lib = "torch" if target == "cuda" else "numpy"
run = ex.prepare(np.random.default_rng(0), ex.demo, dtype="f32", lib=lib, layout="contiguous")
if target == "cuda":
    import torch
    run.args = [a.cuda() for a in run.args]
t = time.perf_counter()
ck = ex.kernel.compile(*run.args, target=target)
ck(*run.args)
if target == "cuda":
    torch.cuda.synchronize()
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def _compile_once(target: str, cache_dir: str) -> float:
    env = dict(os.environ, TILENEST_CACHE_DIR=cache_dir)
    # As an installed package runs: with its bytecode cached (the cold child writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", COMPILE_CHILD, target], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"compile child failed: {done.stderr.strip()[-500:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def compile_times(target: str, repeats: int) -> dict[str, Any]:
    """The seed GEMM's first compile + call in a fresh process: cold (empty cache directory,
    a new one per repeat) and warm (the directory a cold run filled)."""
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="tilenest-cold-") as d:
            cold.append(_compile_once(target, d))
            warm.append(_compile_once(target, d))
    return {"kernel": "examples.gemm (demo case, tunables open)", "cold_s": cold,
            "warm_s": warm, "cold_median_s": statistics.median(cold),
            "warm_median_s": statistics.median(warm)}


# ----------------------------------------------------------------------------------- report

ORDER = ("tilenest call", "tilenest compiled", "tilenest binder", "tilenest python binder",
         "numpy", "torch", "triton jit")


def _cell(case: dict[str, Any], name: str, key: str) -> str:
    if name in case["failures"]:
        return "FAIL"
    t = case["timings"]
    return f"{t[name][key]:.2f}" if name in t and key in t[name] else "-"


def table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    cuda = doc["target"] == "cuda"
    names = [n for n in ORDER if any(n in c["timings"] or n in c["failures"]
                                     for c in doc["cases"])]
    header = ["case", "picked", *(f"{n} µs" for n in names)]
    if cuda:
        header += [f"{n} incl. GPU µs" for n in names]
    base = "torch" if cuda else "numpy"
    header += [f"compiled / {base}", "binder min µs", "binder cpu µs", f"{base} cpu µs",
               "other load"]
    if not cuda:
        header.append("native binder")
    rows = []
    for c in doc["cases"]:
        t = c["timings"]
        row = [c["label"], " ".join(f"{k}={v}" for k, v in c["picked"].items()) or "-",
               *(_cell(c, n, "host_us") for n in names)]
        if cuda:
            row += [_cell(c, n, "inclusive_us") for n in names]
        mine = t.get("tilenest compiled", {}).get("host_us")
        theirs = t.get(base, {}).get("host_us")
        row.append(f"{mine / theirs:.2f}x" if mine and theirs else "-")
        row.append(_cell(c, "tilenest binder", "min_us"))
        row.append(_cell(c, "tilenest binder", "process_cpu_us"))
        row.append(_cell(c, base, "process_cpu_us"))
        row.append(f"{100 * c.get('foreign_cpu_fraction', 0.0):.0f}%")
        if not cuda:
            row.append(c.get("native_binder", "-"))
        rows.append(row)
    return header, rows


def markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    goal = (f"<= {CPU_GOAL_US} µs per call" if doc["target"] == "cpu"
            else f"<= {CUDA_GOAL_RATIO}x torch.add(out=) host time")
    parts = [f"# tilenest call overhead, {doc['target']} ({doc['started']})", "",
             f"Machine: {m['cpu_model']}, {m['cpu_count']} threads; numpy {m['numpy']}, "
             f"torch {m['torch']}; commit `{(m['git_commit'] or '?')[:10]}`"
             f"{' (dirty)' if m['git_dirty'] else ''}. Goal (issue 11): {goal}.", "",
             f"Median of {doc['rounds']} interleaved rounds of {doc['calls']} back-to-back "
             "calls, per call (`binder min`: the fastest round; `cpu µs`: this process's CPU "
             "time per call, all its threads, which preemption by other processes does not "
             "inflate). `picked`: the constants of "
             "the compiled specialization. `other load`: share of the machine's CPU time used "
             "by other processes while the case was timed (above ~5% the numbers are "
             "disturbed). `native binder` (cpu): the state of the binder's native tier after "
             "the timing (`native`: tiered up; `none`: not a numpy-only inline launch).", "",
             markdown_table(*table(doc))]
    comp = doc.get("compile")
    if comp:
        parts += ["", "## Seed GEMM compile in a fresh process", "",
                  markdown_table(["kernel", "cold s (median)", "warm s (median)", "cold runs",
                                   "warm runs"],
                                  [[comp["kernel"], f"{comp['cold_median_s']:.3f}",
                                    f"{comp['warm_median_s']:.3f}",
                                    " ".join(f"{s:.3f}" for s in comp["cold_s"]),
                                    " ".join(f"{s:.3f}" for s in comp["warm_s"])]])]
    fails = [f"{c['label']}: {n}: {e}" for c in doc["cases"] for n, e in c["failures"].items()]
    notes = doc.get("notes", [])
    if fails:
        parts += ["", "## Failures", "", *(f"- {f}" for f in fails)]
    if notes:
        parts += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    return "\n".join(parts) + "\n"


def print_table(doc: dict[str, Any]) -> None:
    header, rows = table(doc)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown_table(header, rows))
        return
    t = Table(title=f"tilenest call overhead ({doc['target']})")
    for h in header:
        t.add_column(h, justify="left" if h in ("case", "picked") else "right")
    for r in rows:
        t.add_row(*r)
    console = Console(width=200)
    console.print(t)
    if doc.get("compile"):
        c = doc["compile"]
        console.print(f"seed GEMM compile: cold {c['cold_median_s']:.3f} s, warm "
                        f"{c['warm_median_s']:.3f} s (medians)")


def run(target: str, quick: bool, compile_repeats: int) -> dict[str, Any]:
    from benchmarks.harness import import_torch

    torch = import_torch()
    if target == "cuda":
        if torch is None or not torch.cuda.is_available():
            raise SystemExit("--target cuda needs torch with a CUDA device")
        cases = cuda_cases(torch)
        sync: Callable[[], None] | None = torch.cuda.synchronize
    else:
        cases = cpu_cases(torch)
        sync = None
    calls, rounds = (200, 3) if quick else (2000, 7)
    doc: dict[str, Any] = {"target": target, "quick": quick, "calls": calls, "rounds": rounds,
                           "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
                           "machine": machine_info(), "cases": [], "notes": []}
    for case in cases:
        failures = {}
        for name, call in list(case.contenders.items()):
            err = check(case, name, call, sync or (lambda: None))
            if err is not None:
                failures[name] = err
                del case.contenders[name]
        with ForeignLoad() as load:
            timings = time_rounds(case.contenders, calls, rounds, sync)
        tiers = [t.state for t in case.tiers]
        doc["cases"].append({"label": case.label, "picked": case.picked, "timings": timings,
                             "failures": failures, "foreign_cpu_fraction": load.fraction,
                             "native_binder": tiers[0] if tiers else "none"})
        doc["notes"] += case.notes
    if compile_repeats > 0:
        doc["compile"] = compile_times(target, compile_repeats)
    return doc


def write(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    folder = out_dir / ("quick" if doc["quick"] else "")
    folder.mkdir(parents=True, exist_ok=True)
    stamp = doc["started"].replace(":", "").replace("-", "")
    stem = f"call-overhead-{doc['target']}"
    paths = {"json": folder / f"{stem}-{stamp}.json", "md": folder / f"{stem}-{stamp}.md"}
    paths["json"].write_text(json.dumps(doc, indent=1, default=str) + "\n")
    text = markdown(doc)
    paths["md"].write_text(text)
    (folder / f"{stem}-latest.md").write_text(text)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="few calls (a smoke run)")
    parser.add_argument("--compile-repeats", type=int, default=3,
                        help="fresh processes per compile measurement (0: skip)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    doc = run(args.target, args.quick, args.compile_repeats)
    print_table(doc)
    if not args.no_write:
        for path in write(doc, args.out).values():
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
