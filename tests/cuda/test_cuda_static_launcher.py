"""Direct calls through torch's static launcher (`torch._C._StaticCudaLauncher`; issue 11's
host time): only for kernels it can launch as Triton would, in the argument order the
installed inductor wrapper uses, else Triton's launcher. Without a GPU the launcher and the
compiled kernel are recording stand-ins; on the GPU the real launcher must be used and
match numpy."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
from launch_hooks import enter_hook

from tilenest.backends.cuda import launcher as L

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def _compiled(signature: dict, **metadata) -> SimpleNamespace:
    meta = {"num_warps": 4, "shared": 1024, "num_ctas": 1, "global_scratch_size": 0,
            "profile_scratch_size": 0, **metadata}
    return SimpleNamespace(src=SimpleNamespace(signature=signature), function=0xF00,
                           metadata=SimpleNamespace(**meta))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(L, "_static", SimpleNamespace(_launch_kernel=lambda *a: calls.append(a)))
    return calls


def test_static_call_launches_with_the_hidden_scratch_pointers(recorded) -> None:
    compiled = _compiled({"A_X": "*fp32", "A_Y": "*fp32", "TN_STATUS": "*i32"})
    call = L.static_call(compiled, (12, 1, 1), 3, lambda s, a: pytest.fail("fallback"))
    assert call is not None
    call(99, [0x1000, 0x2000, 0x3000])
    assert recorded == [(0xF00, 12, 1, 1, 4, 1024, "KKKOO", (0x1000, 0x2000, 0x3000, None,
                                                            None), 99)]


def test_a_kernel_without_scratch_fields_takes_no_hidden_arguments(recorded) -> None:
    compiled = _compiled({"A": "*fp16", "S": "*i32"})
    del compiled.metadata.global_scratch_size, compiled.metadata.profile_scratch_size
    L.static_call(compiled, (2, 1, 1), 2, lambda s, a: None)(7, [16, 32])
    assert recorded[0][6:8] == ("KK", (16, 32))


@pytest.mark.parametrize("signature,count,metadata", [
    ({"A": "*fp32", "N": "i32"}, 2, {}),            # a scalar argument
    ({"A": "*fp32", "B": "*fp32"}, 3, {}),          # not the pointer count launched with
    ({"A": "*fp32"}, 1, {"global_scratch_size": 64}),
    ({"A": "*fp32"}, 1, {"profile_scratch_size": 8}),
    ({"A": "*fp32"}, 1, {"num_ctas": 2}),
    ({"A": "*fp32"}, 1, {"launch_pdl": True}),
    ({"A": "*fp32"}, 1, {"launch_cooperative_grid": True}),
])
def test_kernels_it_cannot_launch_keep_tritons_launcher(recorded, signature, count,
                                                        metadata) -> None:
    assert L.static_call(_compiled(signature, **metadata), (1, 1, 1), count,
                         lambda s, a: None) is None


def test_constexpr_arguments_are_not_passed(recorded) -> None:
    compiled = _compiled({"A": "*fp32", "BLOCK": "constexpr", "S": "*i32"})
    L.static_call(compiled, (1, 1, 1), 2, lambda s, a: None)(0, [16, 32])
    assert recorded[0][6] == "KKOO"


def test_an_installed_launch_hook_takes_tritons_launcher(recorded) -> None:
    fell_back: list = []
    call = L.static_call(_compiled({"A": "*fp32"}), (1, 1, 1), 1,
                         lambda s, a: fell_back.append((s, a)))
    with enter_hook(lambda *a: None):
        call(5, [64])
    assert fell_back == [(5, [64])] and not recorded


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "_static", False)
    monkeypatch.setenv("TILENEST_CUDA_LAUNCHER", "triton")
    assert L.static_launcher() is None


def test_installed_inductor_wrapper_has_the_argument_order() -> None:
    """The order is read from inductor's own call (its file; the module is not imported);
    where neither file exists (an older torch) the static launcher is never used."""
    import sys

    runtime = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime")
    for name in L._STATIC_MODULES:
        path = os.path.join(runtime, name + ".py")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                assert L._STATIC_LAUNCH in "".join(f.read().split())
            break
    else:
        pytest.skip("this torch has no static launcher wrapper")
    saved = L._static
    try:
        L._static = False
        before = set(sys.modules)
        L.static_launcher()
        assert not any(m.startswith("torch._inductor") for m in set(sys.modules) - before)
    finally:
        L._static = saved


def _gpu() -> bool:
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU (no interpreter)")
def test_gpu_launches_through_the_static_launcher() -> None:
    from tilenest.examples.softmax import reference, softmax

    L._static = False  # looked up again, under the test's environment
    assert L.static_launcher() is not None, "torch's static launcher is not usable here"
    x = torch.randn(64, 100, device="cuda")
    y = torch.empty_like(x)
    ck = softmax.compile(x, y, target="cuda")
    exe = ck.executable.extras["executable"]
    ck(x, y)
    calls = [c for launcher in exe.fast.launchers for c in launcher.direct.values()]
    assert calls and all(c is not None and c.__qualname__.split(".")[0] in
                         ("static_call", "stored_call") for c in calls)
    for _ in range(3):
        x.normal_()
        y.fill_(float("nan"))
        ck(x, y)
        np.testing.assert_allclose(y.cpu().numpy(), reference(x.cpu().numpy().astype(np.float64)),
                                   rtol=1e-5, atol=1e-6)
