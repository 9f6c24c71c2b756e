"""Philox4x32-10, the round function behind `tn.rand` / `tn.randn`, against the Random123
known-answer vectors (kat_vectors: philox4x32 10 rounds), and the counter/key mapping."""

from __future__ import annotations

import numpy as np
import pytest

from tilenest.lang.random import philox4x32, philox_rounds, rand_numpy

M = 0xFFFFFFFF
KAT = [  # (counter, key, output) of Philox4x32-10
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M, M, M, M), (M, M), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,want", KAT, ids=["zero", "ones", "pi"])
def test_known_answers(counter, key, want) -> None:
    assert [int(w) for w in philox4x32(counter, key)] == list(want)


def test_vectorized_words_match_scalar_calls() -> None:
    counters = np.array([[0, M, 0x243F6A88], [0, M, 0x85A308D3], [0, M, 0x13198A2E],
                         [0, M, 0x03707344]], np.uint32)
    keys = np.array([[0, M, 0xA4093822], [0, M, 0x299F31D0]], np.uint32)
    out = philox4x32(tuple(counters), tuple(keys))
    for i, (_, _, want) in enumerate(KAT):
        assert [int(w[i]) for w in out] == list(want)


class _IntArith:
    """Python-int words: the folding path capture takes for known words."""

    def mulhilo(self, m: int, w: int) -> tuple[int, int]:
        return (m * w) >> 32, (m * w) & M

    def xor(self, a: int, b: int) -> int:
        return a ^ b

    def add(self, a: int, m: int) -> int:
        return (a + m) & M


@pytest.mark.parametrize("outputs", [1, 2, 4])
def test_the_rounds_on_python_ints_and_truncated_outputs(outputs: int) -> None:
    for counter, key, want in KAT:
        got = philox_rounds(_IntArith(), list(counter), list(key), 10, outputs)  # type: ignore[arg-type]
        assert got == list(want)[:outputs]


def test_rand_numpy_maps_seed_and_offsets_to_key_and_counter() -> None:
    # seed -> (low, high) words of seed mod 2**64; offset of <= 32 bits -> (offset mod 2**32,
    # 0, 0, 0); u = (c0' >> 8) * 2**-24.
    seed = 0x299F31D0A4093822
    offsets = np.array([0x243F6A88, 0, 7], np.uint32)
    c0 = philox4x32((offsets, 0, 0, 0), (seed & M, seed >> 32))[0]
    want = (c0 >> np.uint32(8)).astype(np.float64) / 2 ** 24
    assert np.array_equal(rand_numpy(seed, offsets), want.astype(np.float32))
    # A negative seed is its two's complement pattern; i64 offsets split into (low, high).
    big = np.array([2 ** 40 + 5, -1], np.int64)
    c0 = philox4x32(((big & M).astype(np.uint32), (big.astype(np.uint64) >> np.uint64(32)),
                     0, 0), (M, M))[0]
    assert np.array_equal(rand_numpy(-1, big),
                          ((c0 >> np.uint32(8)) / 2 ** 24).astype(np.float32))
    # An i32 offset of -1 is the u32 offset 2**32 - 1 (its value mod 2**32).
    assert rand_numpy(5, np.array([-1], np.int32))[0] == \
        rand_numpy(5, np.array([M], np.uint32))[0]
