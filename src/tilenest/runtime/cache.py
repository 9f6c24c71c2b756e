"""The cache directory service: where each component keeps its files, the ownership and
permission checks of those directories and files, atomic writes, and the authenticated blob
cache (`DiskCache`) of the object, lowering and plan caches.

Components (`component_dir`): "cpu" (objects and lowerings), "cuda" (generated Triton
source), "plans" (planner decisions), "tune" (the tuning database) and "code" (rewritten
kernel source, runtime/code_cache.py). The Triton source cache
(backends/cuda/source_cache.py) and the tuning database (tune/db.py) use the same directory
and file checks; each keeps its own file format.

Layout: a key (a hex digest chosen by the caller) owns the files `<key>.<part>`. Each file is
`MAGIC | HMAC-SHA256(secret; MAGIC, key, part, payload) | payload`, written to a temporary
file and renamed into place; the caller's last part is written last and marks a complete
entry. The secret is 32 random bytes in `<dir>/.hmac-key` (mode 0600), made on first store.

Threat model. Entries are native code that the caller loads into its own process, so whoever
can write the directory can run code as this user. Therefore:
- The directory is created 0700 and refused (one warning per directory and process; the
  caller then works without a disk cache) when it is not a directory, is owned by another
  user, or is group- or world-writable. This is the real protection: someone who can write
  the directory could also replace the key file and sign entries of their own, so no digest
  kept in the directory can make such a directory safe.
- Every part is checked before its bytes are used. The MAC binds the bytes to the key they
  are stored under and needs the secret, so flipped or truncated bytes, another entry's valid
  file renamed to this key, and files planted while the directory was open to others or
  copied from another machine (another secret) all read as corrupt: the entry is evicted and
  the caller recompiles. A plain sha256 would not do: a planter can recompute it.
- A key file that is not a 32-byte regular file owned by this user, without group or other
  permissions, is not trusted: it is replaced on the next store, which invalidates every
  entry signed with the old one.
- Out of scope: this user and root (they can change anything anyway), and parent
  directories writable by others (they could swap the whole directory between the check and
  the use; a swapped-in directory owned by someone else is refused on the next check).
A directory that cannot be created or written (read-only) is not an error and not worth a
warning: loads miss, stores report False, and the caller compiles in memory.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
import threading
import warnings
from pathlib import Path

from tilenest.config import CACHE_DIR

DEFAULT_CACHE_ROOT = Path("~/.cache/tilenest")
DEFAULT_CPU_CACHE_DIR = DEFAULT_CACHE_ROOT / "cpu"

# component -> its subdirectory (of the default root, of $TILENEST_CACHE_DIR). The cpu cache
# keeps the layout it had before the other components: the variable names its directory.
_COMPONENTS: dict[str, tuple[str, str]] = {
    "cpu": ("cpu", ""), "cuda": ("cuda", "cuda"), "plans": ("", ""), "tune": ("", ""),
    "code": ("", "")}

_MAGIC = b"TNCACHE1"
_MAC_SIZE = hashlib.sha256().digest_size
_KEY_FILE = ".hmac-key"
_KEY_SIZE = 32
# Open for reading without following a symlink or blocking on a FIFO (flags absent elsewhere
# than POSIX count as 0).
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))


class UnsafeCacheWarning(UserWarning):
    """A cache directory was refused because others could write it (or it is not one)."""


def cache_dir(default: Path = DEFAULT_CPU_CACHE_DIR) -> Path:
    """`$TILENEST_CACHE_DIR` when set, else `default` (by default the cpu component's
    directory, `component_dir("cpu")`); read on every call so tests may redirect."""
    env = CACHE_DIR.read()
    return env if env is not None else default.expanduser()


def cache_root() -> Path:
    """`$TILENEST_CACHE_DIR`, else `~/.cache/tilenest`: the directory backends put theirs in."""
    return cache_dir(DEFAULT_CACHE_ROOT)


def component_dir(component: str) -> Path:
    """The directory of one component's files (see `_COMPONENTS`); not created here."""
    try:
        default_sub, env_sub = _COMPONENTS[component]
    except KeyError:
        raise ValueError(f"unknown cache component {component!r}; known: "
                         f"{', '.join(_COMPONENTS)}") from None
    env = CACHE_DIR.read()
    return env / env_sub if env is not None else (DEFAULT_CACHE_ROOT / default_sub).expanduser()


# ---------------------------------------------------------------------------------------------
# Ownership and permission checks

_warned: set[str] = set()
_warned_lock = threading.Lock()


def euid() -> int | None:
    """This process's effective uid (None off POSIX, where the ACLs decide)."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def ownership_problem(st: os.stat_result) -> str | None:
    """Why a file or directory with this status is not this user's alone to write, or None."""
    uid = euid()
    if uid is None:
        return None
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _problem(st: os.stat_result) -> str | None:
    """Why a directory with this status must not hold code this user runs, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    return ownership_problem(st)


def file_problem(path: Path) -> str | None:
    """Why `path` must not be opened as a private file of this user (None: absent or fine):
    a symbolic link, not a regular file, another owner, or writable by others."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"it cannot be inspected ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    return ownership_problem(st)


def create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        os.close(os.open(path, flags, 0o600))
    except FileExistsError:
        pass


def warn_once(directory: Path, problem: str, fallback: str) -> None:
    """One UnsafeCacheWarning per directory and process."""
    with _warned_lock:
        if str(directory) in _warned:
            return
        _warned.add(str(directory))
    warnings.warn(f"tilenest: not using the cache directory {directory}: {problem}; "
                  f"{fallback} (use a directory of your own with mode 0700, e.g. set "
                  f"TILENEST_CACHE_DIR)", UnsafeCacheWarning, stacklevel=3)


def secure_directory(directory: Path, fallback: str = "compiling without a disk cache") -> bool:
    """Create `directory` (mode 0700) when missing; True when it is a directory of this user
    that no one else can write. An unsafe one is refused with a warning (saying `fallback`);
    one that cannot be created returns False silently."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a file in its place: reported by the check below
    except OSError:
        return False
    try:
        st = os.stat(directory)
    except OSError:
        return False
    problem = _problem(st)
    if problem is not None:
        warn_once(directory, problem, fallback)
        return False
    return True


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file, without following a symlink or blocking on a FIFO;
    OSError when it is neither readable nor regular."""
    fd = os.open(path, _READ_FLAGS)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def write_atomic(directory: Path, name: str, data: bytes) -> None:
    """Write `directory/name` through a 0600 temporary file renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------
# The per-directory secret


def _trusted_key(path: Path) -> bytes | None:
    """The secret in `path` when it is a private 32-byte regular file of this user."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        uid = euid()
        if (not stat.S_ISREG(st.st_mode) or st.st_size != _KEY_SIZE
                or (uid is not None and (st.st_uid != uid or st.st_mode & 0o077))):
            return None
        data = f.read(_KEY_SIZE + 1)
    return data if len(data) == _KEY_SIZE else None


def _new_key(directory: Path) -> bytes | None:
    """Install a fresh secret: linked into place when there is none (another process may win
    the race; its key is used then), renamed over an untrusted one."""
    path = directory / _KEY_FILE
    secret = secrets.token_bytes(_KEY_SIZE)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".hmac-key.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secret)
            try:
                os.link(tmp, path)
            except FileExistsError:
                existing = _trusted_key(path)
                if existing is not None:
                    return existing
                os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError:
        return None
    return secret


# ---------------------------------------------------------------------------------------------
# The cache


def _mac(secret: bytes, key: str, part: str, payload: bytes) -> bytes:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    h.update(_MAGIC)
    h.update(f"{len(key)}:{key}\0{len(part)}:{part}\0".encode())
    h.update(payload)
    return h.digest()


class DiskCache:
    """Authenticated byte blobs keyed by (key, part). `parts[-1]` passed to `store` acts as the
    completion marker: `load` reads it first, so a crash mid-store reads as a miss."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def open(cls, directory: Path) -> DiskCache | None:
        """The cache in `directory`, or None when the directory is refused or cannot exist."""
        return cls(directory) if secure_directory(directory) else None

    def _path(self, key: str, part: str) -> Path:
        return self.directory / f"{key}.{part}"

    def load(self, key: str, parts: list[str]) -> dict[str, bytes] | None:
        """Every requested part, verified; None when the entry is missing or incomplete. An
        entry whose MAC does not match (corrupt, planted, another key's) is evicted."""
        secret = _trusted_key(self.directory / _KEY_FILE)
        if secret is None:
            return None  # no trusted secret, so nothing here is known to be ours
        blobs: dict[str, bytes] = {}
        for part in reversed(parts):  # the marker (last part) first: absent means no entry
            try:
                data = read_regular(self._path(key, part))
            except FileNotFoundError:
                return None
            except OSError:
                data = b""  # unreadable or not a regular file: as corrupt
            head, mac = data[:len(_MAGIC)], data[len(_MAGIC):len(_MAGIC) + _MAC_SIZE]
            payload = data[len(_MAGIC) + _MAC_SIZE:]
            if head != _MAGIC or not hmac.compare_digest(mac, _mac(secret, key, part, payload)):
                self.evict(key, parts)
                return None
            blobs[part] = payload
        return {part: blobs[part] for part in parts}

    def store(self, key: str, blobs: dict[str, bytes]) -> bool:
        """Write every part atomically in insertion order; False when the directory is not
        writable (a cache is an optimization, never an error)."""
        secret = _trusted_key(self.directory / _KEY_FILE) or _new_key(self.directory)
        if secret is None:
            return False
        try:
            for part, data in blobs.items():
                write_atomic(self.directory, f"{key}.{part}",
                             _MAGIC + _mac(secret, key, part, data) + data)
        except OSError:
            return False
        return True

    def evict(self, key: str, parts: list[str]) -> None:
        """Remove an entry found to be corrupt (best effort: the directory may be read-only)."""
        for part in parts:
            try:
                self._path(key, part).unlink(missing_ok=True)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------
# What a stored decision or lowering depends on beyond its key: tilenest's own code


@functools.cache
def source_fingerprint() -> str:
    """A digest of the name, size and modification time of every module of the installed
    tilenest package, computed once per process (about a millisecond). Caches of
    decisions and generated code (the plan cache, the cpu lowering cache) key on it, so
    editing the planner or a backend in a source checkout never reuses what the old code
    decided, even when the version string stays the same."""
    h = hashlib.sha256()
    stack = [str(Path(__file__).resolve().parents[1])]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                h.update(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return h.hexdigest()
