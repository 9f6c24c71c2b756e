"""Run-time error flags of asynchronous launches, checked lazily (`tn.check_errors()`).

A kernel whose lowered code can flag a run-time error (an index divided by zero, an
extraction out of range) stores a nonzero code into a status word of its own. On a GPU
that word is a slot of pinned host memory (the kernel writes it through unified virtual
addressing), so a launch never waits for the device and can be captured in a CUDA graph.
A flagged error is reported:

- by `check_errors()`: it synchronizes every device that has pending launches, reads
  every pending slot and raises `DeferredRunTimeError` (a `BackendError`) naming the first
  error's kernel and message, with the count of the others; every slot it read is clean
  afterwards;
- at the next call of the same compiled kernel, before that call launches anything: the
  call raises instead when an earlier launch of that kernel has written its slot by then
  (the read does not wait, so which later call reports it depends on the device's progress);
- at interpreter exit: a message on stderr for errors nobody checked (never raised).

Launches that are known complete when they return report at the call itself, always:
Triton's interpreter (CPU tensors, `TRITON_INTERPRET=1`) runs synchronously, and host
arguments staged through device memory are copied back (a synchronization) before the call
returns. So the interpreter keeps errors deterministic: raised by the call that flagged them.

A launch captured in a CUDA graph gets a slot that belongs to the graph for good: every
replay writes into it. `check_errors()` (and the next eager call of that kernel) reports an
error written by any replay since the previous check, once, and re-arms the slot.

Slots are 16 bytes apart so that every slot pointer is 16-byte aligned (Triton specializes
pointer arguments on that). Completed slots are recycled in batches: every `BATCH` launches
an event is recorded on the streams they used, and a batch whose events have all completed
is read (its errors then wait for the next call or check) and returned to the free list.
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections import deque
from typing import Any

import numpy as np

from tilenest.errors import BackendError

SLOT_WORDS = 4  # int32 words per slot: 16 bytes, so every slot pointer is 16-byte aligned
CHUNK_SLOTS = 1024
BATCH = 64

# A slot is TAKEN until its launch is enqueued, then PENDING until it is read (REPORTED: its
# error was reported; the slot waits for its batch's events before it is reused).
TAKEN, PENDING, REPORTED, CAPTURED, FREE = range(5)


class DeferredRunTimeError(BackendError):
    """Run-time errors flagged by earlier launches; `messages` lists every one reported."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = list(messages)
        more = len(messages) - 1
        text = messages[0] + (f"\n({more} more run-time error{'s' if more > 1 else ''} of "
                              f"earlier launches were pending)" if more else "")
        super().__init__(text, loc=None)


class StatusOwner:
    """The reporting identity of one compiled kernel: its name and its last launch."""

    __slots__ = ("name", "last", "captured")

    def __init__(self, name: str) -> None:
        self.name = name
        self.last: Slot | None = None
        self.captured: list[Slot] = []

    def message(self, code: int, errors: list[str]) -> str:
        what = errors[code - 1] if 0 < code <= len(errors) else f"error code {code}"
        return f"run-time error in kernel `{self.name}`: {what}"


class Slot:
    """One launch's status word: `ptr` is what the kernel gets (host and device address)."""

    __slots__ = ("words", "offset", "ptr", "owner", "errors", "state", "device", "stream",
                 "chunk", "pinned")

    def __init__(self, chunk: Any, words: np.ndarray, offset: int, ptr: int,
                 pinned: bool = False) -> None:
        self.chunk = chunk  # the torch tensor that owns the memory
        self.pinned = pinned
        self.words = words
        self.offset = offset
        self.ptr = ptr
        self.owner: StatusOwner | None = None
        self.errors: list[str] = []
        self.state = FREE
        self.device: int | None = None
        self.stream = 0

    def code(self) -> int:
        return int(self.words[self.offset])

    def tensor(self) -> Any:
        """The slot as a one-element tensor (Triton's interpreter takes tensors only)."""
        return self.chunk[self.offset:self.offset + 1]


class StatusBoard:
    """Every pending status slot of the process (one board; slots of every device)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Free slots by whether their memory is pinned: a device launch needs a pinned slot
        # (Triton refuses a pageable host pointer), a synchronous one takes either kind.
        self.free: dict[bool, list[Slot]] = {True: [], False: []}
        self.chunks: list[Any] = []
        self.batch: list[Slot] = []
        self.closed: deque[tuple[list[Slot], list[Any]]] = deque()
        self.captured: list[Slot] = []
        self.failed: list[tuple[StatusOwner, str]] = []
        self.devices: set[int] = set()

    # ------------------------------------------------------------------ slots
    def _grow(self, pinned: bool) -> None:
        import torch

        chunk = torch.zeros(CHUNK_SLOTS * SLOT_WORDS, dtype=torch.int32, pin_memory=pinned)
        words = chunk.numpy()
        base = chunk.data_ptr()
        self.chunks.append(chunk)
        self.free[pinned].extend(Slot(chunk, words, i * SLOT_WORDS, base + 4 * i * SLOT_WORDS,
                                      pinned) for i in reversed(range(CHUNK_SLOTS)))

    def take(self, owner: StatusOwner, errors: list[str], device: int | None, stream: int,
             capturing: bool = False) -> Slot:
        """A zeroed slot for one launch of `owner` on (`device`, `stream`); device None:
        a synchronous launch (the interpreter), which the caller settles at once."""
        with self.lock:
            if not capturing and len(self.batch) >= BATCH:
                self._close_batch()
            pinned = device is not None and _cuda_available()
            free = self.free[pinned]
            if not free and not capturing:
                self._reclaim()
            if not free:
                self._grow(pinned)
            slot = free.pop()
            slot.words[slot.offset] = 0
            slot.owner, slot.errors, slot.device, slot.stream = owner, errors, device, stream
            if capturing:
                # A graph replays this launch: the slot is the graph's for good.
                slot.state = CAPTURED
                self.captured.append(slot)
                owner.captured.append(slot)
            elif device is None:
                slot.state = PENDING
            else:
                slot.state = TAKEN
                self.batch.append(slot)
                self.devices.add(device)
                owner.last = slot
        return slot

    @staticmethod
    def launched(slot: Slot) -> None:
        """The slot's launch is enqueued (or failed): an event recorded from now on covers
        it. Until then a closing batch carries the slot over to the next batch."""
        if slot.state == TAKEN:
            slot.state = PENDING

    def settle(self, slot: Slot) -> str | None:
        """Read and free the slot of a launch known complete; its error message, if any."""
        with self.lock:
            msg = self._read(slot)
            if slot.state != CAPTURED:
                self._release(slot)
        return msg

    def _read(self, slot: Slot) -> str | None:
        code = slot.code()
        if not code or slot.state == REPORTED:
            return None
        assert slot.owner is not None
        if slot.state == CAPTURED:
            slot.words[slot.offset] = 0  # re-armed for the graph's next replay
        else:
            slot.state = REPORTED
        return slot.owner.message(code, slot.errors)

    def _release(self, slot: Slot) -> None:
        if slot.owner is not None and slot.owner.last is slot:
            slot.owner.last = None
        slot.state, slot.owner, slot.errors = FREE, None, []
        self.free[slot.pinned].append(slot)

    # ------------------------------------------------------------------ batches
    def _close_batch(self) -> None:
        """Record one event per stream the batch launched on (after its launches)."""
        import torch

        # Another thread may have taken a slot and not launched yet: an event recorded now
        # would not cover that launch, so the slot moves on to the next batch.
        done = [s for s in self.batch if s.state != TAKEN]
        self.batch = [s for s in self.batch if s.state == TAKEN]
        events = []
        for device, stream in {(s.device, s.stream) for s in done}:
            event = torch.cuda.Event()
            # Handle 0 is the device's default stream (torch's default current stream).
            event.record(torch.cuda.default_stream(device) if stream == 0
                         else torch.cuda.ExternalStream(stream, device=device))
            events.append(event)
        self.closed.append((done, events))

    def _reclaim(self) -> None:
        """Free the slots of the oldest batches whose launches completed (no waiting)."""
        while self.closed:
            slots, events = self.closed[0]
            if not all(e.query() for e in events):
                return
            self.closed.popleft()
            for slot in slots:
                self._finish(slot)

    def _finish(self, slot: Slot) -> None:
        if slot.state == FREE:
            return
        msg = self._read(slot)
        if msg is not None and slot.owner is not None:
            self.failed.append((slot.owner, msg))
        self._release(slot)

    # ------------------------------------------------------------------ reporting
    def poll(self, owner: StatusOwner) -> str | None:
        """An error of an earlier launch of `owner` visible now (no waiting), or None."""
        last = owner.last
        if not self.failed and not owner.captured and (last is None or not last.code()):
            return None  # the common case, without the lock (a racing write shows up later)
        with self.lock:
            for i, (who, msg) in enumerate(self.failed):
                if who is owner:
                    del self.failed[i]
                    return msg
            if owner.last is not None and owner.last.state == PENDING:
                msg = self._read(owner.last)
                if msg is not None:
                    return msg
            for slot in owner.captured:
                msg = self._read(slot)
                if msg is not None:
                    return msg
        return None

    def collect(self, synchronize: bool = True) -> list[str]:
        """Wait for every pending launch, read every slot, free them; the messages."""
        with self.lock:
            if synchronize and self.devices and _cuda_available():
                import torch

                for device in sorted(self.devices):
                    torch.cuda.synchronize(device)
            # A TAKEN slot's launch is being enqueued by another thread right now: it stays.
            pending = [s for batch, _ in self.closed for s in batch] \
                + [s for s in self.batch if s.state != TAKEN]
            self.closed.clear()
            self.batch = [s for s in self.batch if s.state == TAKEN]
            for slot in pending:
                self._finish(slot)
            messages = [msg for _, msg in self.failed]
            self.failed.clear()
            for slot in self.captured:
                msg = self._read(slot)
                if msg is not None:
                    messages.append(msg)
        return messages


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


BOARD = StatusBoard()


def check_errors() -> None:
    """Wait for the device and raise the run-time errors of every launch not yet checked
    (`DeferredRunTimeError`, a `BackendError`); returns quietly when there are none."""
    messages = BOARD.collect()
    if messages:
        raise DeferredRunTimeError(messages)


def _report_at_exit(board: StatusBoard) -> None:
    try:
        messages = board.collect()
    except Exception as exc:  # the device may be gone at exit; say so, never raise
        sys.stderr.write(f"tilenest: pending run-time errors could not be checked at exit: "
                         f"{exc}\n")
        return
    if messages:
        sys.stderr.write(f"tilenest: {len(messages)} run-time error(s) of launches never "
                         f"checked (tn.check_errors()):\n" + "\n".join(messages) + "\n")


atexit.register(_report_at_exit, BOARD)
