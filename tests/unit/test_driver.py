"""The compile driver (issue 11): stage lists, TILENEST_DUMP per stage, TILENEST_CHECKS between
stages, CompileOptions read once, explain() rendered on demand, the plain call's remembered
kernel, and `tilenest.lang` importing nothing above `tilenest.ir`.

Every compile runs in a fresh kernel object and a fresh cache directory, so no earlier
compile (in this process or on disk) lets a stage be skipped. Results are compared with the
float64 reference interpreter on random inputs.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilenest as tn
import tilenest.backends.cpu.stages as cpu_stages
from tilenest.backends.registry import Executable, stages, target_names
from tilenest.config import DUMP_STAGES
from tilenest.driver.front import FRONT, pipeline
from tilenest.driver.options import CompileOptions
from tilenest.driver.stages import Stage, StageError
from tilenest.errors import ArgumentError
from tilenest.ir import parse_function

SRC = Path(__file__).resolve().parents[2] / "src"
HAS_TRITON = importlib.util.find_spec("triton") is not None


def scale_rows(X, Y, *, BM=4, SCALE=2.0):
    R, C = X.shape
    gm = tn.axis("gm", tn.cdiv(R, BM))
    m, c = tn.axis("m", BM), tn.axis("c", C)
    for p in tn.parallel(gm):
        r0 = p.index() * BM
        Y.tile((r0, 0), (m, c)).store(X.tile((r0, 0), (m, c)).load() * SCALE + 1.0)


def tuned_rows(X, Y, *, ROWS=tn.tunable(4, 1, 8)):
    M, N = X.shape
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(tn.cdiv(M, ROWS)):
        r0 = nest.index() * ROWS
        Y.tile((r0, 0), (r, c)).store(X.tile((r0, 0), (r, c)).load() * 3.0)


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("TILENEST_DUMP", "TILENEST_DUMP_DIR", "TILENEST_CHECKS", "TILENEST_TARGET"):
        monkeypatch.delenv(name, raising=False)


def _xy(m: int = 13, n: int = 6, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, (m, n)).astype(np.float32)
    return x, np.full_like(x, np.nan)


def _oracle(kern: tn.Kernel, x: np.ndarray, **consts: Any) -> np.ndarray:
    y = np.full(x.shape, np.nan, np.float64)
    tn.interpret(kern, x.astype(np.float64), y, precision="float64", **consts)
    return y


def test_each_target_declares_its_stages() -> None:
    assert pipeline("cpu") == ("capture", "verify", "plan", "lower", "codegen", "load")
    assert pipeline("cuda") == ("capture", "verify", "plan", "lower", "load")
    assert pipeline("reference") == ("capture", "verify", "load")
    for target in target_names():  # TILENEST_DUMP accepts every stage and artifact name
        names = {s.name for s in (*FRONT, *stages(target))}
        names |= {a.name for s in (*FRONT, *stages(target)) for a in s.artifacts}
        assert names <= set(DUMP_STAGES), names - set(DUMP_STAGES)


CPU_DUMPS = {"capture": "ir.tir", "verify": "verify.txt", "plan": "plan.txt",
             "lower": "llvm.ll", "codegen": "llvm-opt.ll", "load": "load.txt"}
CUDA_DUMPS = {"capture": "ir.tir", "verify": "verify.txt", "plan": "plan.txt",
              "lower": "triton.py", "load": "load.txt"}
CASES = [("cpu", s, f) for s, f in CPU_DUMPS.items()] + [
    pytest.param("cuda", s, f, marks=pytest.mark.skipif(not HAS_TRITON, reason="no triton"))
    for s, f in CUDA_DUMPS.items()]


@pytest.mark.parametrize("target, stage, file", CASES)
def test_dump_names_a_stage_and_gets_its_artifact(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, target: str, stage: str,
                                                  file: str) -> None:
    out = tmp_path / "dumps"
    monkeypatch.setenv("TILENEST_DUMP", stage)
    monkeypatch.setenv("TILENEST_DUMP_DIR", str(out))
    x, y = _xy()
    ck = tn.Kernel(scale_rows).compile(x, y, target=target)
    assert sorted(p.name for p in out.iterdir()) == [f"scale_rows.{file}"]
    text = (out / f"scale_rows.{file}").read_text()
    expected = {"capture": lambda: parse_function(text).name == "scale_rows",
                "verify": lambda: "verifier and the index-range check passed" in text,
                "plan": lambda: "plan: " in text and "status" in text,
                "lower": lambda: text == ck.source,
                "codegen": lambda: "define" in text and text != ck.source,
                "load": lambda: all(p in text for p in ("programs", "scale_rows"))}
    assert expected[stage](), text[:400]


def test_artifact_names_still_select_their_stage(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("TILENEST_DUMP", "ir,llvm")
    monkeypatch.setenv("TILENEST_DUMP_DIR", str(tmp_path))
    x, y = _xy()
    tn.Kernel(scale_rows).compile(x, y, target="cpu")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "scale_rows.ir.tir", "scale_rows.llvm.ll"]


def _counting_verify(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    verify_mod = sys.modules["tilenest.ir.verify"]  # `tilenest.ir.verify` is the function
    calls: list[str] = []
    real = verify_mod.verify

    def verify(fn: Any) -> None:
        calls.append(fn.name)
        real(fn)

    monkeypatch.setattr(verify_mod, "verify", verify)
    return calls


@pytest.mark.parametrize("checks, expected", [("0", 1), ("1", 1 + len(pipeline("cpu")))])
def test_checks_switch_the_verifier_between_stages(monkeypatch: pytest.MonkeyPatch,
                                                   checks: str, expected: int) -> None:
    """Off: the verify stage alone verifies. On: again after every stage."""
    monkeypatch.setenv("TILENEST_CHECKS", checks)
    calls = _counting_verify(monkeypatch)
    x, y = _xy()
    kern = tn.Kernel(scale_rows)
    kern(x, y, target="cpu")
    assert calls == ["scale_rows"] * expected
    np.testing.assert_allclose(y, _oracle(kern, x), rtol=1e-6)


def _corrupting(stage_name: str) -> tuple[Stage, ...]:
    """The cpu stages with `stage_name` followed by a duplicated parameter (invalid IR)."""
    def wrap(stage: Stage) -> Stage:
        def run(work: Any) -> None:
            stage.run(work)
            work.fn.params.append(work.fn.params[0])
        return Stage(stage.name, run, stage.artifacts)
    return tuple(wrap(s) if s.name == stage_name else s for s in cpu_stages.STAGES)


@pytest.mark.parametrize("stage", ["plan", "lower", "codegen"])
def test_checks_name_the_stage_that_corrupted_the_ir(monkeypatch: pytest.MonkeyPatch,
                                                     stage: str) -> None:
    monkeypatch.setenv("TILENEST_CHECKS", "1")
    monkeypatch.setattr(cpu_stages, "STAGES", _corrupting(stage))
    x, y = _xy()
    with pytest.raises(StageError, match=f"after stage `{stage}`.*distinct param names"):
        tn.Kernel(scale_rows).compile(x, y, target="cpu")


def test_without_checks_a_corrupting_stage_goes_unnoticed(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(cpu_stages, "STAGES", _corrupting("load"))
    calls = _counting_verify(monkeypatch)
    x, y = _xy()
    ck = tn.Kernel(scale_rows).compile(x, y, target="cpu")
    assert calls == ["scale_rows"]  # the verify stage, before the corruption
    assert len(ck.ir.params) == 3


def test_options_are_read_once_per_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[CompileOptions] = []
    real = CompileOptions.from_call.__func__  # type: ignore[attr-defined]

    def from_call(cls: type, *args: Any, **kwargs: Any) -> CompileOptions:
        reads.append(real(cls, *args, **kwargs))
        return reads[-1]

    monkeypatch.setattr(CompileOptions, "from_call", classmethod(from_call))
    x, y = _xy(37, 19)
    for body, consts in ((scale_rows, {"BM": 8}), (tuned_rows, {})):
        reads.clear()
        kern = tn.Kernel(body)
        ck = kern.compile(x, y, target="cpu", seed=3, **consts)
        assert len(reads) == 1, body.__name__
        assert reads[0].seed == 3 and reads[0].target == "cpu" and reads[0].given() == {"seed": 3}
        ck(x, y)
        np.testing.assert_allclose(y, _oracle(kern, x, **ck.constants), rtol=1e-6)


def test_explain_is_rendered_on_demand(monkeypatch: pytest.MonkeyPatch) -> None:
    renders: list[int] = []
    real = cpu_stages.render

    def render(result: Any) -> str:
        renders.append(1)
        return real(result)

    monkeypatch.setattr(cpu_stages, "render", render)
    x, y = _xy(37, 19)
    for body in (scale_rows, tuned_rows):
        renders.clear()
        ck = tn.Kernel(body).compile(x, y, target="cpu")
        ck(x, y)
        assert renders == [] and not ck.executable.explained
        text = ck.explain()
        assert renders == [1] and ck.explain() is text and renders == [1]
        assert "plan: " in text and ("tunables:" in text) == (body is tuned_rows)


def test_executable_explanation_parts() -> None:
    calls: list[str] = []

    def part(name: str) -> Any:
        return lambda: calls.append(name) or name

    exe = Executable("cpu", None, lambda args: None, explanation=part("body"))  # type: ignore
    exe.prepend_explanation(part("head "))
    exe.append_explanation(" tail")
    assert calls == []
    assert exe.explanation == "head body tail" and calls == ["head ", "body"]
    assert exe.explanation == "head body tail" and len(calls) == 2
    exe.explanation = "set"
    assert exe.explanation == "set"


def test_plain_call_reuses_its_last_kernel_only_while_nothing_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The remembered binder is asked first; a change of the cache, TILENEST_TARGET or
    TILENEST_TUNE sends the call down the full path (which may pick another kernel)."""
    import tilenest.runtime.binder as binder

    asked: list[str] = []

    def binder_for(compiled: Any) -> Any:
        def fast(args: tuple) -> bool:
            asked.append(compiled.target)
            return False  # the full path runs the call
        return fast

    monkeypatch.setattr(binder, "binder_for", binder_for)
    kern = tn.Kernel(scale_rows)
    x, y = _xy()
    kern(x, y)
    assert asked == []
    kern(x, y)
    assert asked == ["cpu"]
    monkeypatch.setenv("TILENEST_TARGET", "reference")
    kern(x, y)  # a new resolution: not asked, the reference kernel is remembered now
    assert asked == ["cpu"]
    kern(x, y)
    assert asked == ["cpu", "reference"]
    kern._compiled.clear()
    kern(x, y)
    assert asked == ["cpu", "reference"]
    monkeypatch.setenv("TILENEST_TUNE", "off")
    kern(x, y)
    kern(x, y, BM=4)  # other keyword constants than the last call's: the full path
    assert asked == ["cpu", "reference", "reference"]
    np.testing.assert_allclose(y, _oracle(kern, x), rtol=1e-6)


def test_plain_call_with_the_same_constants_reuses_its_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyword constants equal to the last call's (by type, floats by their bits) ask the
    remembered binder; -0.0 after 0.0, or an option the last call did not name, take the
    full path."""
    import tilenest.runtime.binder as binder

    asked: list[Any] = []

    def binder_for(compiled: Any) -> Any:
        def fast(args: tuple) -> bool:
            asked.append(compiled.constants["SCALE"])
            return False
        return fast

    monkeypatch.setattr(binder, "binder_for", binder_for)
    kern = tn.Kernel(scale_rows)
    x, y = _xy()
    kern(x, y, SCALE=0.0, BM=2)
    kern(x, y, BM=2, SCALE=0.0)  # the same constants in another order
    assert len(asked) == 1 and asked[0] == 0.0
    kern(x, y, BM=2, SCALE=-0.0)  # another specialization: not asked
    assert len(asked) == 1
    kern(x, y, BM=2, SCALE=-0.0)
    assert len(asked) == 2 and str(asked[1]) == "-0.0"
    kern(x, y, BM=2, SCALE=-0.0, seed=1)  # an option the last call did not name
    assert len(asked) == 2
    kern(x, y, BM=2, SCALE=-0.0, seed=1)  # the same option again: asked
    assert len(asked) == 3
    kern(x, y, BM=2, SCALE=3.0)
    np.testing.assert_allclose(y, x * 3.0 + 1.0, rtol=1e-6)
    kern(x, y, BM=2, SCALE=3.0, target="cpu")  # a target named, the last call named none
    assert len(asked) == 3
    kern(x, y, BM=2, SCALE=3.0, target="cpu")  # the same target again: asked
    assert len(asked) == 4
    kern(x, y, BM=2, SCALE=3.0, target="reference")  # another target: the full path
    assert len(asked) == 4


def test_plain_call_with_the_same_options_reuses_its_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Options compare by equality where their values are immutable (scalars, frozen records
    such as NumericalPolicy and plans): an equal policy asks the remembered binder, another
    policy or a `constraints=` dict (mutable) takes the full path."""
    import tilenest.runtime.binder as binder
    from tilenest.numerics import NumericalPolicy

    asked: list[Any] = []

    def binder_for(compiled: Any) -> Any:
        def fast(args: tuple) -> bool:
            asked.append(compiled.options.get("policy"))
            return False
        return fast

    monkeypatch.setattr(binder, "binder_for", binder_for)
    kern = tn.Kernel(scale_rows)
    x, y = _xy()
    fma = NumericalPolicy(allow_fma=True)
    kern(x, y, policy=fma)
    kern(x, y, policy=fma)
    kern(x, y, policy=NumericalPolicy(allow_fma=True))  # equal, not the same object
    assert len(asked) == 2
    kern(x, y, policy=NumericalPolicy())  # another policy: the full path
    assert len(asked) == 2
    kern(x, y, policy=NumericalPolicy())
    assert len(asked) == 3
    kern(x, y, constraints={"num_threads": 1})  # a dict: never compared, always bound
    kern(x, y, constraints={"num_threads": 1})
    assert len(asked) == 3
    np.testing.assert_allclose(y, _oracle(kern, x), rtol=1e-6)


def test_a_fast_path_that_launches_ends_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import tilenest.runtime.binder as binder

    launched: list[tuple] = []

    def binder_for(compiled: Any) -> Any:
        def fast(args: tuple) -> bool:
            launched.append(args)
            compiled.executable.run(dict(zip(compiled.kernel.tensor_params, args,
                                             strict=True)))
            return True
        return fast

    monkeypatch.setattr(binder, "binder_for", binder_for)
    kern = tn.Kernel(scale_rows)
    x, _ = _xy()
    ck = kern.compile(x, np.empty_like(x), target="cpu")
    runs: list[int] = []
    real_run = ck.executable.run
    ck.executable.run = lambda args: (runs.append(1), real_run(args))[1]
    y = np.full_like(x, np.nan)
    ck(x, y)
    assert len(launched) == 1 and len(runs) == 1  # run once, by the fast path
    np.testing.assert_allclose(y, _oracle(kern, x), rtol=1e-6)
    ck(x, y, BM=4)  # keyword arguments: the full path
    assert len(launched) == 1 and len(runs) == 2


@pytest.mark.parametrize("devices, expected", [
    (("cuda:1", "cuda:1"), "cuda"), (("cuda", "cuda"), "cuda"), (("cuda:0", "cpu"), None),
    (("cuda:0", "cuda:1"), None), (("cpu", "cpu"), "cpu")])
def test_default_target_by_device(devices: tuple[str, str], expected: str | None) -> None:
    kern = tn.Kernel(scale_rows)
    key = (tuple(("torch", d, "f32", (4, 4), (4, 1)) for d in devices), ())
    if expected is None:
        with pytest.raises(ArgumentError, match="different devices"):
            kern.default_target(key)
    else:
        assert kern.default_target(key) == expected


FORBIDDEN = ("tilenest.runtime", "tilenest.backends", "tilenest.plan", "tilenest.tune",
             "tilenest.analysis", "tilenest.driver")

_IMPORT_LANG = f"""
import importlib, json, pkgutil, sys, types
# tilenest/__init__ imports the whole package: load tilenest.lang as its own root.
pkg = types.ModuleType("tilenest")
pkg.__path__ = [{str(SRC / "tilenest")!r}]
sys.modules["tilenest"] = pkg
import tilenest.lang
for m in pkgutil.iter_modules(tilenest.lang.__path__):
    importlib.import_module("tilenest.lang." + m.name)
print(json.dumps(sorted(n for n in sys.modules if n.startswith("tilenest"))))
"""


def _lang_modules() -> list[str]:
    out = subprocess.run([sys.executable, "-c", _IMPORT_LANG], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_lang_imports_nothing_above_ir() -> None:
    loaded = _lang_modules()
    assert "tilenest.lang.kernel" in loaded and "tilenest.lang.nest" in loaded
    assert [m for m in loaded if m.startswith(FORBIDDEN)] == []


def test_lang_does_not_load_config() -> None:
    assert "tilenest.config" not in _lang_modules()


def test_tunable_search_verifies_only_the_assignments_it_plans_in_full() -> None:
    """A bound-only planner run prices an assignment's captured IR without running it: that
    IR stays unverified (kept in `_unverified`); every IR planned in full, and so the one
    the call runs, is verified first (`_functions`)."""
    from tilenest.examples.gemm import gemm

    kern = tn.kernel(gemm.fn)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 40)).astype(np.float32)
    c = np.full((64, 40), np.nan, np.float32)
    ck = kern.compile(a, b, c, target="cpu")
    assert kern._functions and kern._unverified  # some bound only, some planned in full
    assert not set(kern._functions) & set(kern._unverified)
    chosen = {k: ck.constants[k] for k in kern.tunables}
    assert any({item[0]: item[-1] for item in key[1]}.items() >= chosen.items()
               for key in kern._functions)
    ck(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
