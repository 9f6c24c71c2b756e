"""The cuda source cache under attack (issue 8, items 16 and 17), on Triton's interpreter.

A Python file planted at `<cache>/cuda/tn_<sha>.py` (code prepended to the genuine source,
another kernel's source, a symlink, a FIFO), or swapped in after the module was loaded, must
never run: the victim computes x + y exactly as the reference interpreter does. A cache
directory others can write is refused with one warning; a read-only one falls back to a
private temporary directory without a PermissionError.
"""

from __future__ import annotations

import json
import linecache
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tilenest
import tilenest as tn
from tilenest.backends.cuda import source_cache
from tilenest.runtime.cache import UnsafeCacheWarning

SRC = str(Path(tilenest.__file__).resolve().parents[1])


def make_add() -> tn.Kernel:
    @tn.kernel
    def combine(X, Y, Out):
        N, = X.shape
        for p in tn.parallel(N):
            i = p.index()
            Out.tile((i,), (1,)).store(X.tile((i,), (1,)).load() + Y.tile((i,), (1,)).load())
    return combine


def make_sub() -> tn.Kernel:
    @tn.kernel
    def combine(X, Y, Out):
        N, = X.shape
        for p in tn.parallel(N):
            i = p.index()
            Out.tile((i,), (1,)).store(X.tile((i,), (1,)).load() - Y.tile((i,), (1,)).load())
    return combine


def inputs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal(37).astype(np.float32) for _ in range(2))
    return x, y, np.full(37, np.nan, np.float32)


def compile_fresh(make: Callable[[], tn.Kernel], seed: int = 0):
    """Compile as a new process would: no module in memory, nothing pinned in linecache."""
    for module in source_cache._MODULES.values():
        linecache.cache.pop(module.__file__ or "", None)
    source_cache._MODULES.clear()
    x, y, out = inputs(seed)
    return make().compile(x, y, out, target="cuda")


def run_checked(compiled, make: Callable[[], tn.Kernel] = make_add, seed: int = 1) -> None:
    """Run `compiled` on fresh inputs; bit for bit equal to the reference interpreter."""
    x, y, got = inputs(seed)
    want = got.copy()
    tn.interpret(make(), x, y, want)
    compiled(x, y, got)
    assert got.tobytes() == want.tobytes(), f"cuda {got} != reference {want}"


@pytest.fixture
def cache(interpreter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TILENEST_CACHE_DIR", str(root))
    monkeypatch.setattr(source_cache, "_MODULES", {})
    return root


def _marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('planted code ran')\n"


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError("blocked on a file planted in the cache")


# ------------------------------------------------------------------------------ item 16


@pytest.mark.parametrize("form", ["prepended", "other-kernel", "symlink", "fifo"])
def test_planted_source_file_is_never_imported(cache: Path, tmp_path: Path, form: str) -> None:
    path = Path(compile_fresh(make_add).executable.extras["path"])
    assert path.parent == cache / "cuda"
    genuine = path.read_text()
    other = Path(compile_fresh(make_sub).executable.extras["path"]).read_text()
    marker = tmp_path / "marker"
    path.unlink()
    if form == "prepended":
        path.write_text(_marker_code(marker) + genuine)
    elif form == "other-kernel":  # x - y under the x + y kernel's name
        path.write_text(other)
    elif form == "symlink":
        (tmp_path / "evil.py").write_text(_marker_code(marker) + genuine)
        path.symlink_to(tmp_path / "evil.py")
    else:
        os.mkfifo(path)
    previous = signal.signal(signal.SIGALRM, _timeout)  # a hang fails the test instead
    signal.alarm(60)
    try:
        compiled = compile_fresh(make_add)
        run_checked(compiled)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not marker.exists(), "the planted code ran"
    assert not path.is_symlink() and path.read_text() == genuine  # replaced by ours
    if form == "symlink":  # replaced, not written through
        assert (tmp_path / "evil.py").read_text() == _marker_code(marker) + genuine


def test_file_swapped_after_loading_is_not_compiled(cache: Path) -> None:
    """Triton's interpreter reads the kernel's source again at its first launch: it must read
    what tilenest generated, not what the file holds by then."""
    compiled = compile_fresh(make_add)
    path = Path(compiled.executable.extras["path"])
    other = Path(compile_fresh(make_sub).executable.extras["path"]).read_text()
    compiled = compile_fresh(make_add)
    path.write_text(other + "# swapped\n")
    run_checked(compiled)


@pytest.mark.parametrize("problem", ["world-writable", "group-writable", "other-owner"])
def test_cuda_directory_others_can_write_is_refused(cache: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    problem: str) -> None:
    path = Path(compile_fresh(make_add).executable.extras["path"])
    genuine = path.read_text()
    marker = tmp_path / "marker"
    path.write_text(_marker_code(marker) + genuine)
    directory = cache / "cuda"
    if problem == "other-owner":
        if os.geteuid() == 0:
            os.chown(directory, 65534, 65534)
        else:
            other = os.geteuid() + 1
            monkeypatch.setattr(os, "geteuid", lambda: other)
    else:
        directory.chmod(0o777 if problem == "world-writable" else 0o770)
    with pytest.warns(UnsafeCacheWarning, match="private temporary directory") as record:
        compiled = compile_fresh(make_add)
        run_checked(compiled)
        again = compile_fresh(make_add, seed=3)  # a second compile: no second warning
        run_checked(again, seed=4)
    assert len([w for w in record if w.category is UnsafeCacheWarning]) == 1
    assert not marker.exists(), "the planted code ran"
    used = Path(compiled.executable.extras["path"])
    assert directory not in used.parents
    st = os.stat(used.parent)
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert used.read_text() == genuine


def test_new_cuda_directory_is_private(cache: Path) -> None:
    compile_fresh(make_add)
    assert stat.S_IMODE((cache / "cuda").stat().st_mode) == 0o700


# ------------------------------------------------------------------------------ item 17

VICTIM = f'''
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import test_source_cache_integrity as t
compiled = t.compile_fresh(t.make_add)
t.run_checked(compiled)
print(json.dumps({{"path": compiled.executable.extras["path"]}}))
'''


def _readonly_prefix() -> list[str]:
    """Root writes through permission bits; dropping the capabilities makes 0500 mean it."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root without setpriv: cannot make a directory read-only")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


@pytest.mark.parametrize("entry", ["absent", "corrupt"])
def test_read_only_cuda_directory_falls_back(cache: Path, tmp_path: Path, entry: str) -> None:
    path = Path(compile_fresh(make_add).executable.extras["path"])
    if entry == "absent":
        path.unlink()
    else:
        path.write_text(path.read_text()[:-20])  # truncated: cannot be replaced in place
    (cache / "cuda").chmod(0o500)
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    env = {**os.environ, "TILENEST_CACHE_DIR": str(cache), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([*_readonly_prefix(), sys.executable, str(script)],
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        (cache / "cuda").chmod(0o700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    used = Path(json.loads(proc.stdout.strip().splitlines()[-1])["path"])
    assert (cache / "cuda") not in used.parents
