"""Lazy run-time error flags (issue 11, item 3): the status slots of `runtime.status`.

The board's bookkeeping is checked directly (a "device" launch is simulated by writing the
slot's word, as the kernel does through UVA); the interpreter's contract end to end: the
call that flags an error raises, deterministically, and leaves nothing pending."""

from __future__ import annotations

import numpy as np
import pytest
from tests.shared_contracts import divide

import tilenest as tn
from tilenest.runtime.status import (
    BATCH,
    CHUNK_SLOTS,
    FREE,
    SLOT_WORDS,
    DeferredRunTimeError,
    Slot,
    StatusBoard,
    StatusOwner,
    _report_at_exit,
    check_errors,
)

ERRORS = ["division by zero (at k.py:3)", "extract index out of range [0, 4)"]


@tn.kernel
def pick(X, Y, *, AT=0):
    (N,) = X.shape
    n = tn.axis("n", N)
    for p in tn.parallel(tn.axis("one", 1)):
        x = X.tile((0,), (n,)).load()
        v = x[p.index() + AT]
        Y.tile((0,), (1,)).store(tn.full(1, 0.0, tn.f32) + v)


def _launch(board: StatusBoard, owner: StatusOwner, stream: int = 0) -> Slot:
    """What the executable does around a device launch: take a slot, enqueue, mark it."""
    slot = board.take(owner, ERRORS, 0, stream)
    board.launched(slot)
    return slot


def _flag(slot, code: int) -> None:
    """What the kernel's `tl.store(TN_STATUS, code, mask=...)` does."""
    slot.words[slot.offset] = code


def test_slots_are_aligned_distinct_and_zeroed() -> None:
    board = StatusBoard()
    owner = StatusOwner("k")
    slots = [_launch(board, owner, 7) for _ in range(10)]
    assert len({s.ptr for s in slots}) == 10
    assert all(s.ptr % 16 == 0 for s in slots)
    _flag(slots[3], 2)
    assert board.collect(synchronize=False) == [f"run-time error in kernel `k`: {ERRORS[1]}"]
    # Synchronous (device None) slots, so no batch closes (that records CUDA events).
    again = [board.take(owner, ERRORS, None, 0) for _ in range(CHUNK_SLOTS)]
    assert all(s.code() == 0 for s in again)  # a recycled slot starts clean
    assert slots[0].words.shape == (CHUNK_SLOTS * SLOT_WORDS,)


def test_next_call_of_the_same_kernel_reports_once() -> None:
    board = StatusBoard()
    bad, good = StatusOwner("bad"), StatusOwner("good")
    s1 = _launch(board, bad)
    _launch(board, good)
    assert board.poll(bad) is None  # nothing written yet: no report, no waiting
    _flag(s1, 1)
    assert board.poll(good) is None  # another kernel's error is not this kernel's
    assert board.poll(bad) == f"run-time error in kernel `bad`: {ERRORS[0]}"
    assert board.poll(bad) is None  # reported once
    assert board.collect(synchronize=False) == []


def test_check_errors_reports_every_pending_error_in_launch_order() -> None:
    board = StatusBoard()
    a, b = StatusOwner("a"), StatusOwner("b")
    slots = [_launch(board, a if i % 2 else b) for i in range(6)]
    _flag(slots[1], 1)
    _flag(slots[4], 2)
    messages = board.collect(synchronize=False)
    assert messages == [f"run-time error in kernel `a`: {ERRORS[0]}",
                        f"run-time error in kernel `b`: {ERRORS[1]}"]
    assert board.collect(synchronize=False) == []
    err = DeferredRunTimeError(messages)
    assert isinstance(err, tn.BackendError)
    assert err.messages == messages and "1 more run-time error" in str(err)


def test_a_captured_slot_reports_each_replays_error_and_rearms() -> None:
    board = StatusBoard()
    owner = StatusOwner("graphed")
    slot = board.take(owner, ERRORS, 0, 0, capturing=True)
    for _ in range(3):  # three replays, each flagging
        _flag(slot, 2)
        assert board.collect(synchronize=False) == \
            [f"run-time error in kernel `graphed`: {ERRORS[1]}"]
        assert slot.code() == 0
    assert board.collect(synchronize=False) == []  # a clean replay reports nothing
    _flag(slot, 1)
    assert board.poll(owner) == f"run-time error in kernel `graphed`: {ERRORS[0]}"
    assert slot in board.captured  # never recycled: the graph still writes it


class FakeEvent:
    """torch.cuda.Event without a device: `query()` is what the test says."""

    done = False
    recorded: list[tuple[int, int]] = []

    def record(self, stream) -> None:
        FakeEvent.recorded.append(stream)

    def query(self) -> bool:
        return FakeEvent.done


def test_batches_recycle_slots_once_their_events_complete(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda s, device=None: (device, s))
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: (device, 0))
    FakeEvent.done, FakeEvent.recorded = False, []
    board = StatusBoard()
    owner = StatusOwner("k")
    first = [_launch(board, owner, stream=5) for _ in range(BATCH)]
    late = board.take(owner, ERRORS, 0, 6)  # taken, its launch not enqueued yet
    _flag(first[7], 1)
    _launch(board, owner, stream=5)  # closes the first batch: one event on stream 5
    assert FakeEvent.recorded == [(0, 5)]
    # A batch closing while `late` is still unlaunched must not cover it.
    for _ in range(BATCH - 2):  # fill the second batch (it holds `late` and one more)
        _launch(board, owner)
    _launch(board, owner)  # closes it
    assert len(board.closed) == 2
    assert late in board.batch and all(late not in b for b, _ in board.closed)
    board.launched(late)
    for slots in board.free.values():  # the next take must reclaim: nothing completed yet,
        slots.clear()  # so it grows
    board.take(owner, ERRORS, 0, 5)
    assert len(board.chunks) == 2 and first[7].state != FREE
    FakeEvent.done = True
    for slots in board.free.values():
        slots.clear()
    board.take(owner, ERRORS, 0, 5)  # reclaims the completed batches
    assert first[0].state == FREE and first[7].state == FREE
    assert board.poll(owner) == f"run-time error in kernel `k`: {ERRORS[0]}"  # kept for it
    assert board.collect(synchronize=False) == []


def test_exit_report_prints_and_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    board = StatusBoard()
    _flag(_launch(board, StatusOwner("late")), 1)
    _report_at_exit(board)
    err = capsys.readouterr().err
    assert "1 run-time error(s)" in err and "`late`" in err and "division by zero" in err


def test_interpreter_raises_at_the_flagging_call(interpreter: None) -> None:
    y = np.full(16, -1, np.int64)
    bad = divide.compile(y, target="cuda", SHIFT=0)
    good = divide.compile(y, target="cuda", SHIFT=3)
    for _ in range(3):
        with pytest.raises(tn.BackendError, match="division by zero"):
            bad(y)
        good(y)  # not blamed for the other kernel's error
    check_errors()  # every error was reported by its call: nothing pending
    want = np.full(16, -1, np.int64)
    tn.interpret(divide, want, SHIFT=3)
    np.testing.assert_array_equal(y, want)


def test_interpreter_extraction_out_of_range(interpreter: None) -> None:
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(1, np.float32)
    ok = pick.compile(x, y, target="cuda", AT=2)
    ok(x, y)
    assert y.tolist() == [2.0]
    bad = pick.compile(x, y, target="cuda", AT=4)
    with pytest.raises(tn.BackendError, match=r"kernel `pick`.*out of range \[0, 4\)"):
        bad(x, y)
    ok(x, y)  # the good executable's next call is clean
    check_errors()
