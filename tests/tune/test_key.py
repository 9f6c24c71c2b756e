"""The structural tuning key (issue 10, DESIGN §5): what changes it and what does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tune_common import SRC, inputs, load_kernel_module

import tilenest as tn
from tilenest.errors import TuneError
from tilenest.tune import TuneKey, key_for
from tilenest.tune.key import COST_MODEL_VERSIONS


@pytest.fixture
def kernel(tmp_path: Path, request: pytest.FixtureRequest) -> tn.Kernel:
    return load_kernel_module(tmp_path, f"tk_key_{request.node.name[5:25]}").scale_rows


def make(extra: float = 0.0, values: tuple = (1, 2, 4)) -> tn.Kernel:
    """The same kernel name (`make.<locals>.scale_rows`) with other bodies or declarations."""
    @tn.kernel
    def scale_rows(X, Y, *, ROWS=tn.tunable(*values)):
        M, N = X.shape
        programs = tn.axis("programs", tn.cdiv(M, ROWS))
        r, c = tn.axis("r", ROWS), tn.axis("c", N)
        for nest in tn.parallel(programs):
            r0 = nest.index() * ROWS
            x = X.tile((r0, 0), (r, c)).load()
            Y.tile((r0, 0), (r, c)).store(x * 2.0 + extra)
    return scale_rows


def test_key_fields_are_text_and_the_digest_is_stable(kernel: tn.Kernel) -> None:
    x, y = inputs()
    key = key_for(kernel, (x, y), {}, None)
    fields = key.fields()
    assert all(isinstance(v, str) for v in fields.values())
    assert fields["kernel"].endswith(".scale_rows") and fields["target"] == "cpu"
    assert fields["args"] == "X=numpy:cpu:f32[64x32]/32,1 Y=numpy:cpu:f32[64x32]/32,1"
    assert fields["policy"] == "IEEE" and fields["cost_model"] == COST_MODEL_VERSIONS["cpu"]
    assert "threads" in fields["device"] and "llvmlite" in fields["compiler"]
    assert fields["tilenest"] == tn.__version__ and fields["driver"] == ""
    assert key_for(kernel, (x, y), {}, None) == key
    assert TuneKey.from_fields(fields).digest() == key.digest()
    assert len(key.digest()) == 64


def test_the_key_does_not_depend_on_the_searched_values(kernel: tn.Kernel) -> None:
    x, y = inputs()
    before = key_for(kernel, (x, y), {}, None)
    kernel.compile(x, y)  # the search captures every assignment
    assert key_for(kernel, (x, y), {}, None) == before
    # Fixing a tunable at its first value: the same structure, another key (fixed differs).
    fixed = key_for(kernel, (x, y), {"ROWS": 1}, None)
    assert fixed.structure == before.structure and fixed.fixed != before.fixed
    assert fixed.digest() != before.digest()


def test_body_and_declarations_are_in_the_structure() -> None:
    x, y = inputs()
    base = key_for(make(), (x, y), {}, None)
    assert key_for(make(), (x, y), {}, None) == base  # a new Kernel of the same source
    assert key_for(make(extra=1.0), (x, y), {}, None).structure != base.structure
    # Same first value (the same captured IR), another declared list: another structure.
    assert key_for(make(values=(1, 2, 8)), (x, y), {}, None).structure != base.structure


@pytest.mark.parametrize("field", ["args", "fixed", "policy", "target", "device"])
def test_each_part_of_a_call_changes_its_field(kernel: tn.Kernel, field: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = inputs()
    base = key_for(kernel, (x, y), {}, None)
    call: dict = {"args": (x, y), "kwargs": {}, "target": None}
    if field == "args":
        call["args"] = (x.astype(np.float64), y.astype(np.float64))
    elif field == "fixed":
        call["kwargs"] = {"ALPHA": 3.0}
    elif field == "policy":
        call["kwargs"] = {"policy": tn.FMA}
    elif field == "target":
        call["target"] = "cuda"
    else:
        monkeypatch.setenv("TILENEST_NUM_THREADS", "5")
    other = key_for(kernel, call["args"], call["kwargs"], call["target"])
    changed = {k for k, v in other.fields().items() if v != base.fields()[k]}
    assert field in changed and other.digest() != base.digest()


def test_shapes_and_strides_are_in_the_args(kernel: tn.Kernel) -> None:
    x, y = inputs()
    base = key_for(kernel, (x, y), {}, None).args
    assert key_for(kernel, inputs(m=65), {}, None).args != base
    xt = np.ascontiguousarray(x.T).T  # same shape and values, column-major
    assert key_for(kernel, (xt, y), {}, None).args == base.replace("X=numpy:cpu:f32[64x32]/32,1",
                                                                   "X=numpy:cpu:f32[64x32]/1,64")


def test_cuda_key_names_the_device_compiler_and_interpreter(
        kernel: tn.Kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = inputs()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    key = key_for(kernel, (x, y), {}, "cuda")
    assert "sm_" in key.device and key.compiler.startswith("triton ")
    assert key.driver and key.cost_model == COST_MODEL_VERSIONS["cuda"]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    interpreted = key_for(kernel, (x, y), {}, "cuda")
    assert "TRITON_INTERPRET" in interpreted.device and interpreted.digest() != key.digest()


def test_untunable_target_is_an_error(kernel: tn.Kernel) -> None:
    x, y = inputs()
    with pytest.raises(TuneError, match="not tuned"):
        key_for(kernel, (x, y), {}, "reference")


ALL_FIELDS = {f: "x" for f in TuneKey.__annotations__}


@pytest.mark.parametrize("bad", [None, {"kernel": "k"}, {**ALL_FIELDS, "extra": "x"},
                                 {**ALL_FIELDS, "device": 3}])
def test_key_from_fields_validates(bad: object) -> None:
    with pytest.raises(TuneError):
        TuneKey.from_fields(bad)


def test_cpu_key_imports_no_torch(tmp_path: Path) -> None:
    code = ("import sys, numpy as np\n"
            "import tilenest as tn\n"
            "from tilenest.tune import key_for\n"
            "@tn.kernel\n"
            "def copy(X, Y, *, B=tn.tunable(1, 2)):\n"
            "    for p in tn.parallel(tn.cdiv(X.shape[0], B)):\n"
            "        Y.tile((p.index() * B,), (B,)).store(X.tile((p.index() * B,), (B,)).load())\n"
            "x = np.ones(8, np.float32)\n"
            "key_for(copy, (x, x.copy()), {}, None)\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
