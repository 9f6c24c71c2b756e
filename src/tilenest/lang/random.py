"""`tn.rand(seed, offsets)` and `tn.randn(seed, offsets)`: counter-based Philox4x32-10.

The generator is Philox4x32 with 10 rounds (Salmon, Moraes, Dror and Shaw, "Parallel random
numbers: as easy as 1, 2, 3", SC 2011; the constants of Random123 and of Triton's `tl.rand`).
Each element is an independent draw: its counter is its offset, its key the seed, so the
result depends on (seed, offset) only, never on tiles, programs or the backend.

- key (k0, k1): the seed's value modulo 2**64 (a Python int in [-2**63, 2**64), an Index
  value, or an integer rank-0 Tile, sign-extended when signed), k0 its low and k1 its high
  32 bits.
- counter (c0, c1, c2, c3): an offset of an integer type of at most 32 bits gives
  (offset mod 2**32, 0, 0, 0); of 64 bits, (low 32 bits, high 32 bits, 0, 0). Offsets below
  2**31 thus give the same numbers in every integer type.
- `rand`: u = (c0' >> 8) * 2**-24 of the first output word c0': uniform on the 2**24 values
  k * 2**-24, k = 0 .. 2**24 - 1 (so 0 <= u < 1, and P(u > p) = 1 - p within 2**-24). Every
  step is exact: the same bits on every backend and in both reference precisions.
- `randn`: Box-Muller of the first two output words, u1 = ((c0' >> 8) + 1) * 2**-24 in
  (0, 1] and u2 = (c1' >> 8) * 2**-24 in [0, 1): z = sqrt(-2 log u1) * cos(2 pi u2), a standard
  normal (|z| <= 5.77) up to the 24-bit grid. It evaluates `log`, `sqrt` and `cos` in f32, so
  it is not bitwise across backends: within 1e-5 * max(1, |z|) of the float64 formula.

Capture expands the generator into integer ops (u32 xors and adds, u64 products of
zero-extended u32 words for the multiply-high, `>> 32`, casts), folding the words that are
known (the zero counter words, and the key schedule of a Python int seed), so every backend
runs the same IR. `philox4x32` runs the same rounds on numpy arrays (the known-answer tests,
and the oracles `rand_numpy` / `randn_numpy`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tilenest.errors import CaptureError, DTypeError
from tilenest.ir import dtypes as dt
from tilenest.lang.values import Index, Tile, cast, index_to_tile

PHILOX_M0 = 0xD2511F53  # multiplies counter word 0
PHILOX_M1 = 0xCD9E8D57  # multiplies counter word 2
PHILOX_W0 = 0x9E3779B9  # key word 0 increment (the golden ratio)
PHILOX_W1 = 0xBB67AE85  # key word 1 increment (sqrt(3) - 1)
ROUNDS = 10
MASK32 = 0xFFFFFFFF
TWO_POW_M24 = 2.0 ** -24

Word = Any  # an int (a known word), a u32 Tile, or a numpy uint32 array


class _Arith:
    """The three word operations of a Philox round on one representation of words."""

    def mulhilo(self, m: int, w: Word) -> tuple[Word, Word]:
        raise NotImplementedError

    def xor(self, a: Word, b: Word) -> Word:
        raise NotImplementedError

    def add(self, a: Word, m: int) -> Word:
        raise NotImplementedError


def key_schedule(arith: _Arith, key: list[Word], rounds: int = ROUNDS
                 ) -> list[tuple[Word, Word]]:
    """The key of each round: (k0, k1), then (W0, W1) added per round (mod 2**32)."""
    k0, k1 = key
    out = [(k0, k1)]
    for _ in range(rounds - 1):
        k0, k1 = arith.add(k0, PHILOX_W0), arith.add(k1, PHILOX_W1)
        out.append((k0, k1))
    return out


def philox_rounds(arith: _Arith, counter: list[Word], key: list[Word], rounds: int = ROUNDS,
                  outputs: int = 4) -> list[Word]:
    """The first `outputs` words of Philox4x32-`rounds` of `counter` under `key`."""
    return scheduled_rounds(arith, counter, key_schedule(arith, key, rounds), outputs)


def scheduled_rounds(arith: _Arith, counter: list[Word], schedule: list[tuple[Word, Word]],
                     outputs: int = 4) -> list[Word]:
    """The Philox rounds under a key schedule (one round per key pair).

    Round: (hi0, lo0) = mulhilo(M0, c0), (hi1, lo1) = mulhilo(M1, c2),
    c' = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0). The last round computes only the words
    asked for."""
    c0, c1, c2, c3 = counter
    for r, (k0, k1) in enumerate(schedule):
        last = r == len(schedule) - 1
        hi1, lo1 = arith.mulhilo(PHILOX_M1, c2)
        n0 = arith.xor(arith.xor(hi1, c1), k0)
        if last and outputs <= 2:
            return [n0, lo1][:outputs]
        hi0, lo0 = arith.mulhilo(PHILOX_M0, c0)
        c0, c1, c2, c3 = n0, lo1, arith.xor(arith.xor(hi0, c3), k1), lo0
    return [c0, c1, c2, c3][:outputs]


# ---------------------------------------------------------------------------- numpy words


class _NumpyArith(_Arith):
    def mulhilo(self, m: int, w: Word) -> tuple[Word, Word]:
        p = np.asarray(w, np.uint64) * np.uint64(m)
        return (p >> np.uint64(32)).astype(np.uint32), (p & np.uint64(MASK32)).astype(np.uint32)

    def xor(self, a: Word, b: Word) -> Word:
        return np.bitwise_xor(np.asarray(a, np.uint32), np.asarray(b, np.uint32))

    def add(self, a: Word, m: int) -> Word:
        return ((np.asarray(a, np.uint64) + np.uint64(m)) & np.uint64(MASK32)).astype(np.uint32)


def philox4x32(counter: tuple[Any, Any, Any, Any], key: tuple[Any, Any],
               rounds: int = ROUNDS) -> list[np.ndarray]:
    """Philox4x32-`rounds` on numpy words (uint32 arrays or ints, broadcast together)."""
    words = [np.asarray(w, np.uint64).astype(np.uint32) for w in (*counter, *key)]
    return [np.asarray(w, np.uint32) for w in
            philox_rounds(_NumpyArith(), words[:4], words[4:], rounds)]


def _numpy_words(seed: int, offsets: np.ndarray) -> list[np.ndarray]:
    pattern = int(seed) % (1 << 64)
    off = np.asarray(offsets)
    if off.dtype.itemsize == 8:
        wide = off.astype(np.uint64)
        c0, c1 = (wide & np.uint64(MASK32)).astype(np.uint32), (wide >> np.uint64(32))
    else:
        c0, c1 = off.astype(np.int64).astype(np.uint64) & np.uint64(MASK32), 0
    zero = np.zeros(off.shape, np.uint32)
    return philox4x32((c0, c1 + zero, zero, zero), (pattern & MASK32, pattern >> 32))


def rand_numpy(seed: int, offsets: np.ndarray) -> np.ndarray:
    """`tn.rand(seed, offsets)` in numpy (float32, exact): the oracle of the tests."""
    c0 = _numpy_words(seed, offsets)[0]
    return ((c0 >> np.uint32(8)).astype(np.float64) * TWO_POW_M24).astype(np.float32)


def randn_numpy(seed: int, offsets: np.ndarray) -> np.ndarray:
    """`tn.randn(seed, offsets)`'s float64 formula (the f32 results are within 1e-5 * max(1,
    |z|) of it)."""
    c0, c1 = _numpy_words(seed, offsets)[:2]
    u1 = ((c0 >> np.uint32(8)).astype(np.float64) + 1.0) * TWO_POW_M24
    u2 = (c1 >> np.uint32(8)).astype(np.float64) * TWO_POW_M24
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


# ---------------------------------------------------------------------------- Tile words


class _TileArith(_Arith):
    """Words are ints (known at capture: folded) or u32 Tiles."""

    def mulhilo(self, m: int, w: Word) -> tuple[Word, Word]:
        if isinstance(w, int):
            p = m * w
            return p >> 32, p & MASK32
        p = cast(w, dt.u64) * m
        return cast(p >> 32, dt.u32), cast(p, dt.u32)

    def xor(self, a: Word, b: Word) -> Word:
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        if isinstance(a, int):
            a, b = b, a
        return a if isinstance(b, int) and b == 0 else a ^ b

    def add(self, a: Word, m: int) -> Word:
        return (a + m) & MASK32 if isinstance(a, int) else a + m


def _seed_tile(seed: Any) -> int | Tile:
    """The seed as a Python int (range-checked) or an integer rank-0 Tile."""
    if isinstance(seed, bool) or not isinstance(seed, (int, Index, Tile)):
        raise CaptureError(f"the seed of tn.rand/tn.randn must be a Python int, an index value "
                           f"or an integer rank-0 Tile, got {type(seed).__name__} {seed!r}")
    if isinstance(seed, int):
        if not -(1 << 63) <= seed < (1 << 64):
            raise DTypeError(f"the seed {seed} does not fit 64 bits (its value modulo 2**64 "
                             f"is the key: pass seed % 2**64)")
        return seed
    t = index_to_tile(seed, dt.i64) if isinstance(seed, Index) else seed
    if t.ndim != 0 or not t.dtype.is_int:
        raise DTypeError(f"the seed of tn.rand/tn.randn must be an integer rank-0 Tile, got "
                         f"{t.type}")
    return t


def _offsets_tile(offsets: Any) -> Tile:
    if isinstance(offsets, Index):
        offsets = index_to_tile(offsets, dt.i64)
    if not isinstance(offsets, Tile) or not offsets.dtype.is_int:
        what = str(offsets.type) if isinstance(offsets, Tile) else type(offsets).__name__
        raise DTypeError(f"the offsets of tn.rand/tn.randn must be an integer Tile (i32, u32 "
                         f"or i64: one draw per element), got {what}")
    return offsets


def _key(seed: int | Tile) -> list[Word]:
    if isinstance(seed, int):
        pattern = seed % (1 << 64)
        return [pattern & MASK32, pattern >> 32]
    wide = cast(seed, dt.u64)  # sign-extended from a signed type
    return [cast(wide, dt.u32), cast(wide >> 32, dt.u32)]


def _counter(offsets: Tile) -> list[Word]:
    if offsets.dtype.bits <= 32:
        return [cast(offsets, dt.u32), 0, 0, 0]
    wide = cast(offsets, dt.u64)
    return [cast(wide, dt.u32), cast(wide >> 32, dt.u32), 0, 0]


class _Hoist(_Arith):
    """A dry run of the rounds outside the map: known words fold, words of the key alone
    (a Tile seed's) are computed now on rank-0 tiles, words of the offset are `ELEMENT`.
    Records every result for `_Replay`, and the key-only tiles element words consume."""

    def __init__(self) -> None:
        self.results: list[tuple[Word, ...]] = []
        self.needed: dict[Any, Tile] = {}  # by IR value, in first-use order

    def _need(self, *words: Word) -> None:
        for w in words:
            if isinstance(w, Tile):
                self.needed.setdefault(w.value, w)

    def mulhilo(self, m: int, w: Word) -> tuple[Word, Word]:
        out = (ELEMENT, ELEMENT) if w is ELEMENT else _TileArith().mulhilo(m, w)
        self.results.append(out)
        return out

    def xor(self, a: Word, b: Word) -> Word:
        if a is ELEMENT or b is ELEMENT:
            self._need(a, b)
            out = ELEMENT
        else:
            out = _TileArith().xor(a, b)
        self.results.append((out,))
        return out

    def add(self, a: Word, m: int) -> Word:
        raise AssertionError("the key schedule is computed before the rounds")


class _Replay(_Arith):
    """The rounds inside the map: a result the dry run knew is reused (a rank-0 tile passed
    into the map, or an int), the rest is computed on the element's words."""

    def __init__(self, hoisted: _Hoist, passed: dict[Any, Tile]) -> None:
        self.results = iter(hoisted.results)
        self.passed = passed

    def inside(self, w: Word) -> Word:
        return self.passed.get(w.value, _UNAVAILABLE) if isinstance(w, Tile) else w

    def mulhilo(self, m: int, w: Word) -> tuple[Word, Word]:
        known = next(self.results)
        if known[0] is ELEMENT:
            return _TileArith().mulhilo(m, w)
        return self.inside(known[0]), self.inside(known[1])

    def xor(self, a: Word, b: Word) -> Word:
        (known,) = next(self.results)
        if known is ELEMENT:
            assert a is not _UNAVAILABLE and b is not _UNAVAILABLE
            return _TileArith().xor(a, b)
        return self.inside(known)

    def add(self, a: Word, m: int) -> Word:
        raise AssertionError("the key schedule is computed before the rounds")


ELEMENT = object()  # a word that depends on the element's offset (`_Hoist`)
_UNAVAILABLE = object()  # a key-only word no element word consumes: not passed in


def _generate(seed: Any, offsets: Any, finish: Callable[[list[Tile]], Any],
              outputs: int) -> Any:
    """`finish` of the first `outputs` Philox words of every offset, as one `map` whose
    scalar body holds the rounds (the cpu emits it as one loop, cuda as one chain of block
    expressions). What depends on the key alone is computed once per program, outside
    the map: the key schedule and the early rounds' key-only words (folded to constants
    for a Python int seed, rank-0 tiles for a Tile seed)."""
    from tilenest.lang.elementwise import map as tile_map

    key_seed, counter_offsets = _seed_tile(seed), _offsets_tile(offsets)
    if counter_offsets.ndim == 0:  # one element (a `tn.map` body's, say): no map needed
        words = philox_rounds(_TileArith(), _counter(counter_offsets), _key(key_seed), ROUNDS,
                              outputs)
        return finish(words)
    schedule = key_schedule(_TileArith(), _key(key_seed))
    hoisted = _Hoist()
    wide = counter_offsets.dtype.bits > 32
    scheduled_rounds(hoisted, [ELEMENT, ELEMENT if wide else 0, 0, 0], schedule, outputs)
    needed = list(hoisted.needed.values())

    def element(offset: Tile, *keys: Tile) -> Any:
        replay = _Replay(hoisted, {t.value: k for t, k in zip(needed, keys, strict=True)})
        pairs = [(replay.inside(k0), replay.inside(k1)) for k0, k1 in schedule]
        out = scheduled_rounds(replay, _counter(offset), pairs, outputs)
        assert all(isinstance(w, Tile) for w in out)  # c0 is a Tile: so is every output
        return finish(out)

    return tile_map(element, counter_offsets, *needed)


def _grid(word: Tile, plus: int = 0) -> Tile:
    """(word >> 8) + plus, times 2**-24, in f32: exact for plus in {0, 1}."""
    top = cast(word >> 8, dt.f32)
    return (top + float(plus) if plus else top) * TWO_POW_M24


def rand(seed: Any, offsets: Any) -> Tile:
    """Uniform f32 in [0, 1) with the layout of `offsets`, one independent draw per element
    from Philox4x32-10 (module docstring): the top 24 bits of the first output word times
    2**-24, exact and bitwise equal on every backend."""
    return _generate(seed, offsets, lambda w: _grid(w[0]), 1)


def rand4x(seed: Any, offsets: Any) -> tuple[Tile, Tile, Tile, Tile]:
    """Four uniform f32 tiles in [0, 1) with the layout of `offsets`: the four Philox output
    words of each offset's counter, each on the 2**-24 grid of `rand` (the first is
    `rand(seed, offsets)`), exact and bitwise equal on every backend. One generator call
    per four draws (Triton's `tl.rand4x`, curand's `curand_uniform4`): a memory-bound kernel
    that needs a draw per element (dropout) takes counters for groups of four elements and
    interleaves the words with `tn.join` and `tn.reshape`."""
    return _generate(seed, offsets, lambda w: tuple(_grid(x) for x in w), 4)


def rand4x_numpy(seed: int, offsets: np.ndarray) -> list[np.ndarray]:
    """`tn.rand4x(seed, offsets)` in numpy (float32, exact): the oracle of the tests."""
    return [((c >> np.uint32(8)).astype(np.float64) * TWO_POW_M24).astype(np.float32)
            for c in _numpy_words(seed, offsets)]


def randn(seed: Any, offsets: Any) -> Tile:
    """Standard normal f32 with the layout of `offsets` (Box-Muller of the first two Philox
    words, module docstring); within 1e-5 * max(1, |z|) of the float64 formula, not bitwise
    across backends (it evaluates log, sqrt and cos in f32)."""
    cos = _math("cos")
    from tilenest.lang.elementwise import log, sqrt

    def normal(w: list[Tile]) -> Tile:
        u1, u2 = _grid(w[0], 1), _grid(w[1])
        return sqrt(log(u1) * -2.0) * cos(u2 * (2.0 * math.pi))

    return _generate(seed, offsets, normal, 2)


def _math(name: str) -> Callable[[Any], Tile]:
    import tilenest

    fn = getattr(tilenest, name, None)
    if fn is None:
        raise CaptureError(f"tn.randn needs tn.{name}, which this build lacks")
    return fn
