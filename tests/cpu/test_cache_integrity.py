"""The cpu disk cache under attack and corruption (issue 8, items 16 and 17).

Entries are planted, swapped and corrupted for real in a cache directory, and a victim process
then compiles and runs `combine` (x + y) from that directory. Loading a bad object could crash
or run foreign code, so every victim runs in a subprocess with a timeout; it compares its
output bit for bit with the reference interpreter and reports the cache counters as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

import tilenest
from tilenest.backends.cpu import jit
from tilenest.runtime import cache as disk_cache

MARKER = "TILENEST-PLANTED-PAYLOAD-RAN"
SRC = str(Path(tilenest.__file__).resolve().parents[1])

# {op} is the kernel's operator: the victim adds; the "other kernel" subtracts under the same
# name, so its object defines the same entry points.
VICTIM = '''
import json, os, sys, warnings
if os.environ.get("FAKE_EUID"):  # "owned by another user" where the test cannot chown
    os.geteuid = lambda: int(os.environ["FAKE_EUID"])
import numpy as np
import tilenest as tn
from tilenest.backends.cpu import jit

def make():
    @tn.kernel
    def combine(X, Y, Out):
        N, = X.shape
        for p in tn.parallel(N):
            i = p.index()
            Out.tile((i,), (1,)).store(X.tile((i,), (1,)).load() {op} Y.tile((i,), (1,)).load())
    return combine

def run(kernel, seed):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal(37).astype(np.float32) for _ in range(2))
    want = np.full(37, np.nan, np.float32)
    got = want.copy()
    tn.interpret(kernel, x, y, want)
    compiled = kernel.compile(x, y, got, target="cpu")
    compiled(x, y, got)
    stats = jit.cache_stats()
    return {{"same": got.tobytes() == want.tobytes(), "disk_hits": stats.disk_hits,
             "misses": stats.misses, "key": compiled.executable.extras["executable"]
             .fast.compiled.key}}

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = run(make(), int(sys.argv[1]))
    jit.clear_memory_cache()  # as a new process would: the second compile reads the disk
    second = run(make(), int(sys.argv[1]) + 1)
print(json.dumps({{"first": first, "second": second,
                  "warnings": [str(w.message) for w in caught
                               if type(w.message).__name__ == "UnsafeCacheWarning"]}}))
'''


def _readonly_prefix() -> list[str]:
    """Root writes through permission bits; dropping the capabilities makes 0500 mean it."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root without setpriv: cannot make a directory read-only")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def run_victim(workdir: Path, cache: Path, op: str = "+", seed: int = 0,
               prefix: list[str] | None = None, env: dict[str, str] | None = None) -> dict:
    script = workdir / ("victim_add.py" if op == "+" else "victim_sub.py")
    script.write_text(VICTIM.format(op=op))
    full_env = {**os.environ, "TILENEST_CACHE_DIR": str(cache), "TILENEST_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    full_env.update(env or {})
    proc = subprocess.run([*(prefix or []), sys.executable, str(script), str(seed)],
                          capture_output=True, text=True, timeout=240, env=full_env,
                          cwd=workdir)
    if proc.returncode < 0:
        pytest.fail(f"the victim died of {signal.Signals(-proc.returncode).name}:\n"
                    f"{proc.stderr[-3000:]}")
    assert MARKER not in proc.stdout + proc.stderr, "the planted payload ran in the victim"
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_recompiled_and_restored(result: dict) -> None:
    """The victim computed x + y without using the bad entry, then stored a good one."""
    first, second = result["first"], result["second"]
    assert first["same"] and second["same"]
    assert (first["disk_hits"], first["misses"]) == (0, 1)
    assert (second["disk_hits"], second["misses"]) == (1, 0)


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A cache directory holding valid entries of the victim (x + y) and of another kernel
    with the same entry names (x - y); returns it with both keys."""
    workdir = tmp_path_factory.mktemp("populate")
    cache = workdir / "cache"
    add = run_victim(workdir, cache, "+")
    sub = run_victim(workdir, cache, "-")
    assert add["first"]["same"] and sub["first"]["same"]
    assert add["first"]["key"] != sub["first"]["key"]
    return cache, add["first"]["key"], sub["first"]["key"]


@pytest.fixture
def cache(populated: tuple[Path, str, str], tmp_path: Path) -> Path:
    """A private copy of the populated cache (modes kept)."""
    copy = tmp_path / "cache"
    shutil.copytree(populated[0], copy)
    return copy


def victim_key(populated: tuple[Path, str, str]) -> str:
    return populated[1]


def evil_object(entry: str) -> bytes:
    """A valid host object defining `entry` whose code calls puts(MARKER) and computes
    nothing: what an attacker plants under the victim's key."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ir = (f'@msg = private unnamed_addr constant [{len(MARKER) + 1} x i8] c"{MARKER}\\00"\n'
          "declare i32 @puts(ptr)\n"
          f"define void @{entry}(ptr %a, i64 %s, i64 %e) {{\n"
          "  %r = call i32 @puts(ptr @msg)\n  ret void\n}\n")
    mod = llvm.parse_assembly(ir)
    mod.triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(jit=True)
    return tm.emit_object(mod)


def _forge_key(directory: Path) -> bytes:
    """An attacker's own secret, installed as the directory's key file (as it could be while
    the directory was writable by others); owned by another user where the test can chown,
    else readable by others: untrusted either way."""
    secret = b"A" * 32
    key_file = directory / ".hmac-key"
    key_file.unlink(missing_ok=True)
    key_file.write_bytes(secret)
    if os.geteuid() == 0:
        os.chown(key_file, 65534, 65534)
    else:
        key_file.chmod(0o644)
    return secret


def _signed(secret: bytes, key: str, part: str, payload: bytes) -> bytes:
    """A part in the cache's own format, signed with `secret` (full knowledge of the format)."""
    return disk_cache._MAGIC + disk_cache._mac(secret, key, part, payload) + payload


# ------------------------------------------------------------------------------ item 16


@pytest.mark.parametrize("form", ["raw", "signed-with-planted-key"])
def test_planted_object_calling_puts_is_never_run(populated, cache: Path, tmp_path: Path,
                                                  form: str) -> None:
    key = victim_key(populated)
    evil = evil_object("combine_phase0")
    if form == "raw":
        planted = evil
    else:
        planted = _signed(_forge_key(cache), key, "o", evil)
    (cache / f"{key}.o").write_bytes(planted)
    assert_recompiled_and_restored(run_victim(tmp_path, cache))
    assert (cache / f"{key}.o").read_bytes() != planted  # evicted and stored again
    key_file = cache / ".hmac-key"
    assert key_file.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(key_file.stat().st_mode) & 0o077 == 0


def test_another_kernels_valid_entry_under_the_victims_key(populated, cache: Path,
                                                           tmp_path: Path) -> None:
    _, add_key, sub_key = populated
    for part in ("o", "ll"):  # the x - y entry, renamed to the x + y key
        shutil.copyfile(cache / f"{sub_key}.{part}", cache / f"{add_key}.{part}")
    assert_recompiled_and_restored(run_victim(tmp_path, cache))


@pytest.mark.parametrize("mode", [0o777, 0o770, "other-owner"])
def test_directory_others_can_write_is_refused(populated, cache: Path, tmp_path: Path,
                                               mode: int | str) -> None:
    """Someone who can write the directory can also replace its key file, so here even an
    entry correctly signed with the planted key must not be used: the directory is refused."""
    key = victim_key(populated)
    secret = b"B" * 32
    (cache / ".hmac-key").write_bytes(secret)  # passes every check on the key file itself
    for part, payload in (("o", evil_object("combine_phase0")), ("ll", b"; planted\n")):
        (cache / f"{key}.{part}").write_bytes(_signed(secret, key, part, payload))
    env: dict[str, str] = {}
    if mode == "other-owner":
        if os.geteuid() == 0:
            os.chown(cache, 65534, 65534)
        else:
            env["FAKE_EUID"] = str(os.geteuid() + 1)
    else:
        cache.chmod(mode)  # type: ignore[arg-type]
    before = sorted(p.name for p in cache.iterdir())
    result = run_victim(tmp_path, cache, env=env)
    first, second = result["first"], result["second"]
    assert first["same"] and second["same"]
    assert (first["disk_hits"], second["disk_hits"]) == (0, 0)  # no disk cache at all
    assert len(result["warnings"]) == 1, result["warnings"]  # once per directory
    assert str(cache) in result["warnings"][0]
    assert sorted(p.name for p in cache.iterdir()) == before  # nothing written there


def test_cache_directory_is_created_private(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "new" / "nested" / "cache"
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(target))
    jit.clear_memory_cache()
    jit.compile_ir(_IR, ["tn_cache_test"])
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    key_file = target / ".hmac-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and key_file.stat().st_size == 32
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in target.iterdir())


# ------------------------------------------------------------------------------ item 17


def _elf_start(data: bytes) -> int:
    at = data.find(b"\x7fELF")
    assert at >= 0
    return at


def _flip(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]


def _zero_shnum(data: bytes) -> bytes:
    at = _elf_start(data) + 0x3C  # e_shnum of an ELF64 header
    return data[:at] + b"\0\0" + data[at + 2:]


def _garbage_after_header(data: bytes) -> bytes:
    at = _elf_start(data) + 64  # a valid ELF64 header, then noise of the same length
    noise = np.random.default_rng(7).integers(0, 256, len(data) - at, dtype=np.uint8)
    return data[:at] + noise.tobytes()


CORRUPTIONS = {
    "flipped-byte": ("o", _flip),
    "truncated": ("o", lambda d: d[:len(d) // 2]),
    "empty": ("o", lambda d: b""),
    "e_shnum-0": ("o", _zero_shnum),
    "garbage-after-elf-header": ("o", _garbage_after_header),
    "ll-not-utf8": ("ll", lambda d: d[:-16] + b"\xff\xfe\xc3\x28" * 4),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_entry_is_evicted_and_recompiled(populated, cache: Path, tmp_path: Path,
                                                 corruption: str) -> None:
    part, corrupt = CORRUPTIONS[corruption]
    path = cache / f"{victim_key(populated)}.{part}"
    bad = corrupt(path.read_bytes())
    path.write_bytes(bad)
    assert_recompiled_and_restored(run_victim(tmp_path, cache))
    assert path.read_bytes() != bad


@pytest.mark.parametrize("entry", ["valid", "corrupt"])
def test_read_only_cache_directory_falls_back(populated, cache: Path, tmp_path: Path,
                                              entry: str) -> None:
    """A valid entry in a read-only directory is used; a corrupt one cannot be evicted, and
    the victim compiles in memory instead of failing."""
    key = victim_key(populated)
    if entry == "corrupt":
        (cache / f"{key}.o").write_bytes(_flip((cache / f"{key}.o").read_bytes()))
    before = {p.name: p.read_bytes() for p in cache.iterdir()}
    cache.chmod(0o500)
    try:
        result = run_victim(tmp_path, cache, prefix=_readonly_prefix())
    finally:
        cache.chmod(0o700)
    first, second = result["first"], result["second"]
    assert first["same"] and second["same"] and not result["warnings"]
    if entry == "valid":
        assert (first["disk_hits"], second["disk_hits"]) == (1, 1)
    else:
        assert (first["disk_hits"], first["misses"]) == (0, 1)
        assert (second["disk_hits"], second["misses"]) == (0, 1)
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before


def test_cache_directory_that_cannot_be_created(monkeypatch) -> None:
    monkeypatch.setenv("TILENEST_CACHE_DIR", "/proc/tilenest-cannot-exist/cache")
    jit.clear_memory_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read-only is not worth a warning
        module = jit.compile_ir(_IR, ["tn_cache_test"])
    assert module.address("tn_cache_test") and jit.cache_stats().misses == 1


# ------------------------------------------------------------------ the store, as a unit

_IR = "define i64 @tn_cache_test(i64 %x) {\n  %y = add i64 %x, 1\n  ret i64 %y\n}\n"


def _store(directory: Path, key: str = "k" * 64) -> disk_cache.DiskCache:
    store = disk_cache.DiskCache.open(directory)
    assert store is not None
    assert store.store(key, {"ll": b"text", "o": b"\x7fELF object"})
    return store


def test_entries_round_trip_and_are_bound_to_their_key(tmp_path: Path) -> None:
    store = _store(tmp_path / "c")
    assert store.load("k" * 64, ["ll", "o"]) == {"ll": b"text", "o": b"\x7fELF object"}
    for part in ("ll", "o"):
        c = tmp_path / "c"
        shutil.copyfile(c / f"{'k' * 64}.{part}", c / f"{'j' * 64}.{part}")
    assert store.load("j" * 64, ["ll", "o"]) is None
    assert not list((tmp_path / "c").glob("j*"))  # evicted


@pytest.mark.parametrize("problem", ["group-readable", "wrong-size", "symlink"])
def test_untrusted_key_file_invalidates_entries(tmp_path: Path, problem: str) -> None:
    store = _store(tmp_path / "c")
    key_file = tmp_path / "c" / ".hmac-key"
    if problem == "group-readable":
        key_file.chmod(0o640)
    elif problem == "wrong-size":
        key_file.write_bytes(key_file.read_bytes() + b"x")
    else:
        (tmp_path / "elsewhere").write_bytes(key_file.read_bytes())
        key_file.unlink()
        key_file.symlink_to(tmp_path / "elsewhere")
    assert store.load("k" * 64, ["ll", "o"]) is None
    assert store.store("k" * 64, {"ll": b"text", "o": b"obj"})  # a new key replaces it
    assert not key_file.is_symlink() and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert store.load("k" * 64, ["ll", "o"]) == {"ll": b"text", "o": b"obj"}


def test_unsafe_directory_warns_once(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o700)
    directory.chmod(0o777)
    with pytest.warns(disk_cache.UnsafeCacheWarning, match="others can write it"):
        assert disk_cache.DiskCache.open(directory) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk_cache.DiskCache.open(directory) is None
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.warns(disk_cache.UnsafeCacheWarning, match="not a directory"):
        assert disk_cache.DiskCache.open(not_a_dir) is None


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError("blocked opening a FIFO planted as a cache entry")


def test_fifo_in_place_of_an_entry_does_not_block(tmp_path: Path) -> None:
    store = _store(tmp_path / "c")
    entry = tmp_path / "c" / f"{'k' * 64}.o"
    entry.unlink()
    os.mkfifo(entry)
    previous = signal.signal(signal.SIGALRM, _timeout)  # a hang fails the test instead
    signal.alarm(20)
    try:
        assert store.load("k" * 64, ["ll", "o"]) is None  # read as corrupt, evicted
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not entry.exists()
