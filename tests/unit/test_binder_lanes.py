"""The fast binder's inlined cuda lane (`LaneLaunch`): the alignment key computed in line
selects the primed lane (Triton's 16-byte divisibility, first pointer the highest bit), its
direct calls get the current stream and the pointers plus the status word, the executable
records the build and path; no lane, or tensors on a device that is not current, go
through `launch`. Checked with CPU tensors and a stand-in executable (the generated code is
the same for CUDA ones)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tilenest.backends.cuda.launch import LaneLaunch
from tilenest.backends.cuda.launcher import alignment_key
from tilenest.runtime.binder import binder_for

torch = pytest.importorskip("torch")


class Exe:
    def __init__(self, device: str) -> None:
        self.written = [False, True]
        self.spans = [(0, 64), (0, 64)]
        self.accepts_pointers = True
        self.launched: list[tuple] = []
        self.lanes: dict = {}
        self.current = 0
        self.inline_launch = LaneLaunch(self.lanes, lambda: self.current,
                                        lambda d: 1000 + d, self)
        self.last_build = self.last_path = "none"

    def launch(self, *args) -> None:
        self.launched.append(args)


def _binder(device: str = "cpu"):
    exe = Exe(device)
    key = (("torch", device, "f32", (16,), (1,)), ("torch", device, "f32", (16,), (1,)))
    compiled = SimpleNamespace(executable=SimpleNamespace(extras={"executable": exe},
                                                          target="cpu"),
                               key=(key,), kernel=SimpleNamespace(tensor_params=[0, 1],
                                                                  name="k"))
    return binder_for(compiled), exe


def test_a_primed_lane_is_taken_in_line() -> None:
    fast, exe = _binder()
    x, y = torch.randn(16), torch.empty(16)
    ptrs = [x.data_ptr(), y.data_ptr()]
    assert fast((x, y)) and exe.launched == [(tuple(ptrs), False)]  # no lane yet
    seen: list = []
    exe.lanes[(0, False, alignment_key(ptrs))] = ([lambda s, raw: seen.append((s, raw))], 77)
    assert fast((x, y))
    assert seen == [(1000, [*ptrs, 77])] and len(exe.launched) == 1
    assert (exe.last_build, exe.last_path) == ("fast", "direct")


def test_the_alignment_key_matches_the_launchers() -> None:
    fast, exe = _binder()
    base = torch.randn(64)
    for off in (0, 1, 2, 4, 5):
        x, y = base[off:off + 16], torch.empty(40)[off % 3:off % 3 + 16]
        ptrs = [x.data_ptr(), y.data_ptr()]
        exe.lanes.clear()
        exe.lanes[(0, False, alignment_key(ptrs))] = ([lambda s, raw: None], 0)
        exe.launched.clear()
        assert fast((x, y)) and not exe.launched, off  # found the lane of that key


def test_aliased_arguments_take_the_safe_lane() -> None:
    fast, exe = _binder()
    x = torch.randn(16)
    key = alignment_key([x.data_ptr()] * 2)
    exe.lanes[(0, True, key)] = ([lambda s, raw: None], 0)
    assert fast((x, x)) and not exe.launched and exe.last_build == "safe"


def test_an_indexed_device_that_is_not_current_goes_through_launch(monkeypatch) -> None:
    import tilenest.runtime.binder as B

    monkeypatch.setattr(B, "_torch_checks", lambda src, i, entry, **kw: _cpu_checks(src, i))
    fast, exe = _binder("cuda:1")
    x, y = torch.randn(16), torch.empty(16)
    ptrs = [x.data_ptr(), y.data_ptr()]
    exe.lanes[(1, False, alignment_key(ptrs))] = ([lambda s, raw: None], 0)
    exe.current = 0
    assert fast((x, y)) and exe.launched == [(tuple(ptrs), False, 1)]
    exe.current = 1
    assert fast((x, y)) and len(exe.launched) == 1 and exe.last_path == "direct"


def _cpu_checks(src, i: int) -> bool:
    src.line(f"p{i} = a{i}.data_ptr()", 2)
    return True
