"""The CPU worker pool: every program runs exactly once, for any split, thread count or caller."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np
import pytest

from tilenest.backends.cpu import jit
from tilenest.runtime import pool as pool_module
from tilenest.runtime.pool import PHASE_SIGNATURE, WorkerPool, default_pool

# write_double: out[i] = 2*i. count_once: hits[i] += 1 and total += 1, both atomically, so a
# program run twice (or never) shows up in `hits` and a lost update in `total`.
PHASES_IR = """
define void @write_double(ptr %args, i64 %start, i64 %end) {
entry:
  %out = load ptr, ptr %args
  %any = icmp slt i64 %start, %end
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [%start, %entry], [%next, %loop]
  %v = mul i64 %i, 2
  %p = getelementptr i64, ptr %out, i64 %i
  store i64 %v, ptr %p
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}

define void @count_once(ptr %args, i64 %start, i64 %end) {
entry:
  %hits = load ptr, ptr %args
  %total_slot = getelementptr ptr, ptr %args, i64 1
  %total = load ptr, ptr %total_slot
  %any = icmp slt i64 %start, %end
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [%start, %entry], [%next, %loop]
  %p = getelementptr i64, ptr %hits, i64 %i
  %old = atomicrmw add ptr %p, i64 1 seq_cst
  %old_total = atomicrmw add ptr %total, i64 1 seq_cst
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ctypes._CFuncPtr]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TILENEST_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        module = jit.compile_ir(PHASES_IR, ["write_double", "count_once"])
    finally:
        mp.undo()
    fns = {name: PHASE_SIGNATURE(module.address(name)) for name in module.entry_points}
    fns["_module"] = module  # type: ignore[assignment]  # keeps the code alive
    return fns


@pytest.fixture(scope="module", params=[1, 2, 3, 8])
def pool(request: pytest.FixtureRequest) -> WorkerPool:
    p = WorkerPool(request.param)
    yield p
    p.close()


class Buffers:
    """The argument block of both phases: args[0] = hits/out, args[1] = total counter."""

    def __init__(self, n: int) -> None:
        self.data = np.full(max(n, 1), -1, dtype=np.int64)
        self.total = np.zeros(1, dtype=np.int64)
        self.args = (ctypes.c_void_p * 2)(self.data.ctypes.data, self.total.ctypes.data)

    @property
    def ptr(self) -> int:
        return ctypes.addressof(self.args)


@pytest.mark.parametrize("total", [0, 1, 7, 1000])
@pytest.mark.parametrize("grain", [1, 3, 64])
def test_each_program_runs_exactly_once(phases, pool: WorkerPool, total: int,
                                        grain: int) -> None:
    buf = Buffers(total)
    buf.data[:] = 0
    pool.run(phases["count_once"], buf.ptr, total, grain)
    np.testing.assert_array_equal(buf.data[:total], np.ones(total, dtype=np.int64))
    assert buf.total[0] == total

    out = Buffers(total)
    pool.run(phases["write_double"], out.ptr, total, grain)
    np.testing.assert_array_equal(out.data[:total], np.arange(total) * 2)
    assert (out.data[total:] == -1).all()


def test_address_is_accepted_as_fn(phases) -> None:
    p = WorkerPool(2)
    try:
        buf = Buffers(50)
        buf.data[:] = 0
        p.run(ctypes.cast(phases["count_once"], ctypes.c_void_p).value, buf.ptr, 50, 4)
        assert (buf.data == 1).all()
    finally:
        p.close()


def test_concurrent_launches_from_two_python_threads(phases) -> None:
    p = WorkerPool(3)
    errors: list[BaseException] = []
    buffers = [Buffers(500) for _ in range(2)]
    for b in buffers:
        b.data[:] = 0

    def launch_many(buf: Buffers) -> None:
        try:
            for _ in range(40):
                p.run(phases["count_once"], buf.ptr, 500, 7)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=launch_many, args=(b,)) for b in buffers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.close()
    assert not errors
    for b in buffers:
        assert (b.data == 40).all()
        assert b.total[0] == 40 * 500


def test_python_errors_reach_the_caller() -> None:
    p = WorkerPool(2)
    try:
        def fails_on_late_programs(args_ptr: int, start: int, end: int) -> None:
            if end > 5:
                raise KeyError("boom")

        with pytest.raises(KeyError, match="boom"):
            p.run(fails_on_late_programs, 0, 10, 1)
        with pytest.raises(ValueError):
            p.run(fails_on_late_programs, 0, 10, 0)
        seen: list[tuple[int, int]] = []
        p.run(lambda a, s, e: seen.append((s, e)), 0, 4, 1)  # still usable afterwards
        assert sorted(i for s, e in seen for i in range(s, e)) == [0, 1, 2, 3]
    finally:
        p.close()


def test_single_thread_runs_on_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_NUM_THREADS", "1")
    p = default_pool()
    assert p.num_threads == 1
    threads: set[int] = set()
    p.run(lambda a, s, e: threads.add(threading.get_ident()), 0, 100, 3)
    assert threads == {threading.get_ident()}


def test_default_pool_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_NUM_THREADS", "2")
    first = default_pool()
    assert first.num_threads == 2 and default_pool() is first
    monkeypatch.setenv("TILENEST_NUM_THREADS", "3")
    second = default_pool()
    assert second.num_threads == 3 and second is not first
    covered: list[int] = []
    first.run(lambda a, s, e: covered.extend(range(s, e)), 0, 10, 1)  # closed: runs serially
    assert sorted(covered) == list(range(10))
    monkeypatch.setenv("TILENEST_NUM_THREADS", "0")
    with pytest.raises(ValueError, match="TILENEST_NUM_THREADS"):
        default_pool()


def test_measure_overhead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(tmp_path))
    p = WorkerPool(2)
    try:
        us = p.measure_overhead(repeats=20)
        assert us > 0 and p.last_launch_overhead_estimate_us == us
    finally:
        p.close()
    assert pool_module._noop is not None
