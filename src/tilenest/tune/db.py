"""The tuning database: raw samples and winners per structural key, in SQLite (DESIGN §3a).

One file, `cache_root()/tuning.sqlite3`, in WAL mode with a 10 s busy timeout, so several
processes may measure and read at once. Trust and integrity follow the other caches
(runtime/cache.py): the directory must be this user's and not writable by others, the file
must be a regular file of this user (a symlink is refused), and `PRAGMA quick_check` runs on
open; a file that is not SQLite, or fails the check, is moved aside with a warning and a new
one is made (a plain call never crashes on it). Connections are per process (a forked child
opens its own) and serialized by a lock within one. Records decode through
`TuneCandidate.from_json` and `TuneKey.from_fields`, never eval or pickle, and an import is
validated whole before one transaction writes it.

Invariant kept by SQL triggers as well as by `set_winner`: a winner is a candidate with an
`ok` sample under its key and no failed one (a failure recorded later drops the winner).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import sqlite3
import stat
import statistics
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilenest.errors import TuneError
from tilenest.runtime.cache import cache_root, read_regular, secure_directory
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.key import TuneKey

DB_NAME = "tuning.sqlite3"
SCHEMA_VERSION = "1"
EXPORT_FORMAT = "tilenest-tuning-db"
STATUSES = ("ok", "compile-error", "run-error", "mismatch")
ROLES = ("model-top", "shortlist", "default", "winner-remeasure")
BUSY_TIMEOUT_MS = 10_000
MAX_ERROR_CHARS = 4000
MAX_IMPORT_BYTES = 256 << 20
MAX_FEATURES_CHARS = 1 << 20
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_UID = re.compile(r"[0-9a-f]{32}")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys (
    digest TEXT PRIMARY KEY, fields TEXT NOT NULL, target TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL REFERENCES keys(digest), candidate TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({", ".join(f"'{s}'" for s in STATUSES)})),
    seconds TEXT NOT NULL, median REAL, predicted REAL, terms TEXT, error TEXT,
    role TEXT NOT NULL CHECK (role IN ({", ".join(f"'{r}'" for r in ROLES)})),
    created REAL NOT NULL, features TEXT);
CREATE INDEX IF NOT EXISTS samples_by_candidate ON samples (key, candidate, status);
CREATE TABLE IF NOT EXISTS winners (
    key TEXT PRIMARY KEY REFERENCES keys(digest), candidate TEXT NOT NULL,
    seconds REAL NOT NULL CHECK (seconds > 0), created REAL NOT NULL);
CREATE TRIGGER IF NOT EXISTS winner_insert_needs_ok BEFORE INSERT ON winners
WHEN NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = NEW.key
                 AND s.candidate = NEW.candidate AND s.status = 'ok')
  OR EXISTS (SELECT 1 FROM samples s WHERE s.key = NEW.key
             AND s.candidate = NEW.candidate AND s.status != 'ok')
BEGIN SELECT RAISE(ABORT, 'a winner needs an ok sample and no failed one'); END;
CREATE TRIGGER IF NOT EXISTS winner_update_needs_ok BEFORE UPDATE ON winners
WHEN NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = NEW.key
                 AND s.candidate = NEW.candidate AND s.status = 'ok')
  OR EXISTS (SELECT 1 FROM samples s WHERE s.key = NEW.key
             AND s.candidate = NEW.candidate AND s.status != 'ok')
BEGIN SELECT RAISE(ABORT, 'a winner needs an ok sample and no failed one'); END;
CREATE TRIGGER IF NOT EXISTS failure_drops_winner AFTER INSERT ON samples
WHEN NEW.status != 'ok'
BEGIN DELETE FROM winners WHERE key = NEW.key AND candidate = NEW.candidate; END;
"""


class TuningDBWarning(UserWarning):
    """The tuning database file was unusable (moved aside) or refused; tilenest goes on
    without its records."""


@dataclass(frozen=True)
class Sample:
    """One measured (or failed) candidate under one key."""

    key: dict[str, str]               # the key's fields
    digest: str
    candidate: TuneCandidate
    status: str
    seconds: tuple[float, ...]        # raw timings
    median: float | None
    predicted: float | None           # the cost model's value for this candidate
    terms: dict[str, float] | None    # the cost breakdown (calibration's features)
    error: str | None
    role: str
    created: float                    # unix time
    uid: str = ""
    features: dict[str, Any] | None = None  # what the cost model priced (tune/features.py)


@dataclass(frozen=True)
class Entry:
    """One key: its fields, its winner (candidate, seconds) if any, how many samples."""

    digest: str
    fields: dict[str, str]
    winner: tuple[TuneCandidate, float] | None
    samples: int


# ---------------------------------------------------------------------------------------------
# Validation of values that go into (or come out of) the database


def _finite(value: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 or (positive and value == 0):
        want = "a finite positive number" if positive else "a finite non-negative number"
        raise TuneError(f"{what} must be {want}, got {value!r:.60}", loc=None)
    return float(value)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise TuneError(f"{what} must be one of {', '.join(allowed)}, got {value!r:.60}",
                        loc=None)
    return str(value)


def _seconds(values: Any) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, Sequence)):
        raise TuneError(f"seconds must be a sequence of timings, got {values!r:.60}", loc=None)
    return tuple(_finite(v, "a timing") for v in values)


def _terms(terms: Any) -> dict[str, float] | None:
    if terms is None:
        return None
    if not isinstance(terms, Mapping):
        raise TuneError(f"terms must map names to numbers, got {terms!r:.60}", loc=None)
    out = {}
    for name, v in terms.items():
        if not isinstance(name, str) or len(name) > 200:
            raise TuneError(f"a cost term name must be a short string, got {name!r:.60}",
                            loc=None)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TuneError(f"cost term {name}: {v!r:.60} is not a finite number", loc=None)
        out[name] = float(v)
    return out


def _features(features: Any) -> str | None:
    """The cost-model features as stored JSON text (a JSON object of finite numbers)."""
    if features is None:
        return None
    if not isinstance(features, Mapping):
        raise TuneError(f"features must be a JSON object, got {features!r:.60}", loc=None)
    try:
        text = _dumps(dict(features))
    except (TypeError, ValueError, RecursionError) as e:
        raise TuneError(f"features are not finite JSON: {e}", loc=None) from None
    if len(text) > MAX_FEATURES_CHARS:
        raise TuneError(f"features longer than {MAX_FEATURES_CHARS} characters", loc=None)
    return text


def _error(error: Any) -> str | None:
    if error is None:
        return None
    if not isinstance(error, str):
        raise TuneError(f"error must be text, got {type(error).__name__}", loc=None)
    return error[:MAX_ERROR_CHARS]


def _predicted(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise TuneError(f"predicted must be a finite number or None, got {value!r:.60}",
                        loc=None)
    return float(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _loads(text: str) -> Any:
    def reject(word: str) -> Any:
        raise ValueError(f"{word} is not a finite number")

    return json.loads(text, parse_constant=reject)


# ---------------------------------------------------------------------------------------------
# The file


def _euid() -> int | None:
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def _file_problem(path: Path) -> str | None:
    """Why `path` must not be opened as this user's database (None: absent or fine)."""
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
    uid = _euid()
    if uid is not None and st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        os.close(os.open(path, flags, 0o600))
    except FileExistsError:
        pass


def _errorcode(e: sqlite3.Error) -> int:
    return (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF


class _Corrupt(Exception):
    """The file is not a usable tuning database (the reason is the message)."""


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `<db>.lock` (POSIX; elsewhere, no lock)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        raise TuneError(f"the lock file {lock_path} cannot be opened: {e.strerror or e}",
                        loc=None) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# Live databases, so a forked child drops the parent's connections and locks.
_LIVE: weakref.WeakSet[TuningDB] = weakref.WeakSet()
_ABANDONED: list[sqlite3.Connection] = []  # a parent's connections: never closed in a child


def _after_fork_in_child() -> None:
    for db in list(_LIVE):
        db._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class TuningDB:
    """Raw samples and winners per `TuneKey` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        if not secure_directory(self.path.parent, fallback="not using the tuning database"):
            raise TuneError(f"tuning database {self.path}: its directory is not a private "
                            f"directory of this user (or cannot be created)", loc=None)
        problem = _file_problem(self.path)
        if problem is not None:
            raise TuneError(f"tuning database {self.path} is refused: {problem}", loc=None)
        _LIVE.add(self)
        with self._lock:
            self._connection()

    @classmethod
    def default(cls, create: bool = True) -> TuningDB | None:
        """The database under the cache directory; None when the directory or file is
        refused (with a warning), or when `create` is False and there is no file yet."""
        root = cache_root()
        path = root / DB_NAME
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return None
            st = None
        except OSError:
            return None
        ident = (str(path), st.st_dev, st.st_ino) if st is not None else None
        cached = _DEFAULTS.get(str(path))
        if cached is not None:
            if ident is not None and cached[0] == ident:
                return cached[1]
            cached[1].close()  # the file was removed or replaced since
        if not secure_directory(root, fallback="not using the tuning database"):
            return None
        try:
            db = cls(path)
        except TuneError as e:
            warnings.warn(f"tilenest: {e}; going on without the tuning database",
                          TuningDBWarning, stacklevel=2)
            return None
        with contextlib.suppress(OSError):  # not remembered if it vanished meanwhile
            st = os.lstat(path)
            _DEFAULTS[str(path)] = ((str(path), st.st_dev, st.st_ino), db)
        return db

    # -- connections
    def _forked(self) -> None:
        """In a forked child: a fresh lock, and the parent's connection left alone."""
        self._lock = threading.RLock()
        if self._conn is not None:
            _ABANDONED.append(self._conn)
        self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            if self._conn is not None:
                _ABANDONED.append(self._conn)
            self._conn = self._open()
            self._pid = os.getpid()
        return self._conn

    def _raw(self) -> sqlite3.Connection:
        try:
            _create_private(self.path)
        except OSError as e:
            raise TuneError(f"tuning database {self.path} cannot be created: "
                            f"{e.strerror or e}", loc=None) from None
        problem = _file_problem(self.path)
        if problem is not None:
            raise TuneError(f"tuning database {self.path} is refused: {problem}", loc=None)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _check(self, conn: sqlite3.Connection) -> None:
        """Raise _Corrupt unless the file is an intact tuning database (or an empty file)."""
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as e:
            if _errorcode(e) in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
                raise _Corrupt(str(e)) from None
            raise
        if rows != [("ok",)]:
            raise _Corrupt("; ".join(str(r[0]) for r in rows[:3]))
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "meta" not in tables:
            raise _Corrupt(f"it holds other tables ({', '.join(sorted(tables))})")
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if row is not None and row[0] != SCHEMA_VERSION:
                raise _Corrupt(f"schema version {row[0]!r}, this tilenest reads "
                               f"{SCHEMA_VERSION!r}")

    def _setup(self, conn: sqlite3.Connection) -> None:
        """WAL mode and the schema (idempotent; concurrent openers wait on the lock)."""
        for attempt in range(50):
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if _errorcode(e) not in (_SQLITE_BUSY, _SQLITE_LOCKED) or attempt == 49:
                    raise
                time.sleep(0.05)
        if str(mode).lower() != "wal":
            raise TuneError(f"tuning database {self.path}: WAL mode refused ({mode})",
                            loc=None)
        conn.execute("PRAGMA foreign_keys = ON")
        have = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
                            ).fetchone()[0]
        if have >= 3:
            _add_features_column(conn)
            return
        with _transaction(conn):
            for statement in _statements(_SCHEMA):
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)",
                         (SCHEMA_VERSION,))
        _add_features_column(conn)  # a samples table made before the column

    def _open(self) -> sqlite3.Connection:
        """A checked connection; an unusable file is replaced, any other failure (locked
        past the busy timeout, read-only, I/O) is a TuneError."""
        try:
            conn = self._raw()
        except sqlite3.Error as e:
            raise TuneError(f"tuning database {self.path} cannot be opened: {e}",
                            loc=None) from None
        try:
            self._check(conn)
            self._setup(conn)
            return conn
        except _Corrupt as e:
            conn.close()
            reason = str(e)
        except sqlite3.DatabaseError as e:
            conn.close()
            if _errorcode(e) not in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
                raise TuneError(f"tuning database {self.path} cannot be opened: {e}",
                                loc=None) from None
            reason = str(e)
        except BaseException:
            conn.close()
            raise
        try:
            return self._replace_corrupt(reason)
        except sqlite3.Error as e:
            raise TuneError(f"tuning database {self.path} is not usable ({reason}) and "
                            f"cannot be replaced: {e}", loc=None) from None

    def _replace_corrupt(self, reason: str) -> sqlite3.Connection:
        """Move the unusable file aside (under the lock file, re-checked there: another
        process may have replaced it already) and start a new database."""
        with _file_lock(self.path):
            conn = self._raw()
            try:
                self._check(conn)
                self._setup(conn)
                return conn  # replaced meanwhile by another process
            except (_Corrupt, sqlite3.DatabaseError):
                conn.close()
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}-"
                                        f"{os.getpid()}")
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            warnings.warn(f"tilenest: the tuning database {self.path} is not usable "
                          f"({reason}); moved it to {aside} and started a new one",
                          TuningDBWarning, stacklevel=4)
            conn = self._raw()
            self._setup(conn)
            return conn

    @contextlib.contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._connection()
            except sqlite3.IntegrityError as e:
                raise TuneError(f"tuning database {self.path}: {e}", loc=None) from None
            except sqlite3.Error as e:
                raise TuneError(f"tuning database {self.path}: {type(e).__name__}: {e}",
                                loc=None) from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
            _LIVE.discard(self)
            for name, (_ident, db) in list(_DEFAULTS.items()):
                if db is self:
                    del _DEFAULTS[name]

    # -- writing
    def add_sample(self, key: TuneKey, candidate: TuneCandidate, *, status: str,
                   seconds: Sequence[float] = (), predicted: float | None = None,
                   terms: Mapping[str, float] | None = None, error: str | None = None,
                   role: str = "shortlist", features: Mapping[str, Any] | None = None
                   ) -> None:
        """Record one measurement (or failure) of `candidate` under `key`; `features` are
        what the cost model priced (tune/features.py), for calibration."""
        row = _sample_row(key.digest(), candidate, status=status, seconds=seconds,
                          predicted=predicted, terms=terms, error=error, role=role,
                          created=time.time(), uid=secrets.token_hex(16), features=features)
        with self._use() as conn, _transaction(conn):
            _insert_key(conn, key, row["created"])
            _insert_sample(conn, row)

    def set_winner(self, key: TuneKey, candidate: TuneCandidate, seconds: float) -> None:
        """Make `candidate` the key's winner: it needs an ok sample and no failed one."""
        seconds = _finite(seconds, "the winner's seconds", positive=True)
        digest, text = key.digest(), candidate.to_json()
        with self._use() as conn, _transaction(conn):
            statuses = {r[0] for r in conn.execute(
                "SELECT DISTINCT status FROM samples WHERE key = ? AND candidate = ?",
                (digest, text))}
            if "ok" not in statuses or statuses - {"ok"}:
                why = ("it has no sample" if not statuses else
                       f"its samples are {', '.join(sorted(statuses))}")
                raise TuneError(f"candidate {candidate.label()} cannot be the winner of "
                                f"{key.kernel}: {why} (a winner needs a correct measurement "
                                f"and no failed one)", loc=None)
            conn.execute("INSERT INTO winners (key, candidate, seconds, created) "
                         "VALUES (?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                         "candidate = excluded.candidate, seconds = excluded.seconds, "
                         "created = excluded.created", (digest, text, seconds, time.time()))

    def clear(self) -> int:
        """Remove every key, sample and winner; the number of samples and winners removed."""
        with self._use() as conn, _transaction(conn):
            removed = conn.execute("DELETE FROM winners").rowcount
            removed += conn.execute("DELETE FROM samples").rowcount
            conn.execute("DELETE FROM keys")
        return removed

    # -- reading
    def winner(self, key: TuneKey) -> tuple[TuneCandidate, float] | None:
        with self._use() as conn:
            row = conn.execute("SELECT candidate, seconds FROM winners WHERE key = ?",
                               (key.digest(),)).fetchone()
        if row is None:
            return None
        return TuneCandidate.from_json(row[0]), float(row[1])

    def samples(self, target: str | None = None, key: TuneKey | None = None) -> list[Sample]:
        """Every sample (of one target's keys, or of one key), in the order recorded."""
        query = ("SELECT k.fields, s.key, s.candidate, s.status, s.seconds, s.median, "
                 "s.predicted, s.terms, s.error, s.role, s.created, s.uid, s.features "
                 "FROM samples s "
                 "JOIN keys k ON k.digest = s.key")
        where, params = [], []
        if target is not None:
            where.append("k.target = ?")
            params.append(target)
        if key is not None:
            where.append("s.key = ?")
            params.append(key.digest())
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._use() as conn:
            rows = conn.execute(query + " ORDER BY s.id", tuple(params)).fetchall()
        return [Sample(key=_loads(f), digest=d, candidate=TuneCandidate.from_json(c),
                       status=st, seconds=tuple(_loads(sec)), median=med, predicted=pred,
                       terms=None if terms is None else _loads(terms), error=err, role=role,
                       created=created, uid=uid,
                       features=None if feats is None else _loads(feats))
                for f, d, c, st, sec, med, pred, terms, err, role, created, uid, feats in rows]

    def entries(self) -> list[Entry]:
        with self._use() as conn:
            rows = conn.execute(
                "SELECT k.digest, k.fields, w.candidate, w.seconds, "
                "(SELECT count(*) FROM samples s WHERE s.key = k.digest) "
                "FROM keys k LEFT JOIN winners w ON w.key = k.digest "
                "ORDER BY k.created, k.digest").fetchall()
        return [Entry(digest, _loads(fields),
                      None if cand is None else (TuneCandidate.from_json(cand), float(sec)),
                      count)
                for digest, fields, cand, sec, count in rows]

    # -- sharing
    def export(self, path: Path) -> int:
        """Write every key, sample and winner to a JSON file; the number of samples and
        winners written."""
        with self._use() as conn:
            keys = [{"digest": d, "fields": _loads(f)} for d, f in conn.execute(
                "SELECT digest, fields FROM keys ORDER BY created, digest")]
            samples = [{"uid": uid, "key": key, "candidate": _loads(cand), "status": status,
                        "seconds": _loads(sec), "predicted": pred,
                        "terms": None if terms is None else _loads(terms), "error": err,
                        "role": role, "created": created,
                        "features": None if feats is None else _loads(feats)}
                       for uid, key, cand, status, sec, pred, terms, err, role, created, feats
                       in conn.execute("SELECT uid, key, candidate, status, seconds, "
                                       "predicted, terms, error, role, created, features "
                                       "FROM samples ORDER BY id")]
            winners = [{"key": key, "candidate": _loads(cand), "seconds": sec,
                        "created": created} for key, cand, sec, created in conn.execute(
                            "SELECT key, candidate, seconds, created FROM winners "
                            "ORDER BY key")]
        doc = {"format": EXPORT_FORMAT, "version": int(SCHEMA_VERSION), "keys": keys,
               "samples": samples, "winners": winners}
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(_dumps(doc) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return len(samples) + len(winners)

    def import_(self, path: Path) -> int:
        """Add the records of an exported file (validated whole first: a hostile or broken
        file is a TuneError and nothing is written). Samples already present (same id) are
        skipped; a winner replaces the stored one only when it measured faster. Returns the
        number of samples and winners added or replaced."""
        keys, samples, winners = _parse_export(Path(path))
        added = 0
        with self._use() as conn, _transaction(conn):
            for key, created in keys:
                _insert_key(conn, key, created)
            for row in samples:
                added += _insert_sample(conn, row, ignore_existing=True)
            for digest, text, seconds, created in winners:
                added += conn.execute(
                    "INSERT INTO winners (key, candidate, seconds, created) VALUES "
                    "(?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET candidate = "
                    "excluded.candidate, seconds = excluded.seconds, created = "
                    "excluded.created WHERE excluded.seconds < winners.seconds",
                    (digest, text, seconds, created)).rowcount
        return added


_DEFAULTS: dict[str, tuple[tuple, TuningDB]] = {}


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (the write lock up front, so concurrent writers queue on the busy
    timeout instead of failing an upgrade), COMMIT, or ROLLBACK on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _statements(script: str) -> list[str]:
    """The statements of the schema script (triggers hold `;` inside BEGIN ... END)."""
    out, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text.endswith(";") and (not text.upper().startswith("CREATE TRIGGER")
                                   or text.upper().endswith("END;")):
            out.append(text)
            current = []
    return out


def _insert_key(conn: sqlite3.Connection, key: TuneKey, created: float) -> None:
    conn.execute("INSERT OR IGNORE INTO keys (digest, fields, target, created) "
                 "VALUES (?, ?, ?, ?)", (key.digest(), _dumps(key.fields()), key.target,
                                         created))


def _add_features_column(conn: sqlite3.Connection) -> None:
    """Migrate a database made before samples kept their cost features (ALTER TABLE, under
    the write lock: concurrent openers re-check there)."""
    def missing() -> bool:
        return "features" not in {r[1] for r in conn.execute("PRAGMA table_info(samples)")}

    if missing():
        with _transaction(conn):
            if missing():
                conn.execute("ALTER TABLE samples ADD COLUMN features TEXT")


def _sample_row(digest: str, candidate: TuneCandidate, *, status: Any, seconds: Any,
                predicted: Any, terms: Any, error: Any, role: Any, created: Any,
                uid: Any, features: Any = None) -> dict[str, Any]:
    """A validated samples row."""
    if not isinstance(candidate, TuneCandidate):
        raise TuneError(f"candidate must be a TuneCandidate, got {candidate!r:.60}", loc=None)
    if not isinstance(uid, str) or not _UID.fullmatch(uid):
        raise TuneError(f"a sample id must be 32 hex digits, got {uid!r:.60}", loc=None)
    secs = _seconds(seconds)
    status = _choice(status, STATUSES, "status")
    if status == "ok" and not secs:
        raise TuneError("an ok sample needs its timings (seconds)", loc=None)
    tm = _terms(terms)
    return {"uid": uid, "key": digest, "candidate": candidate.to_json(), "status": status,
            "seconds": _dumps(list(secs)),
            "median": statistics.median(secs) if secs else None,
            "predicted": _predicted(predicted), "terms": None if tm is None else _dumps(tm),
            "error": _error(error), "role": _choice(role, ROLES, "role"),
            "created": _finite(created, "created"), "features": _features(features)}


def _insert_sample(conn: sqlite3.Connection, row: dict[str, Any],
                   ignore_existing: bool = False) -> int:
    verb = "INSERT OR IGNORE" if ignore_existing else "INSERT"
    return conn.execute(
        f"{verb} INTO samples (uid, key, candidate, status, seconds, median, predicted, "
        f"terms, error, role, created, features) VALUES (:uid, :key, :candidate, :status, "
        f":seconds, :median, :predicted, :terms, :error, :role, :created, :features)",
        row).rowcount


def _parse_export(path: Path) -> tuple[list, list, list]:
    """Every record of an exported file, validated (TuneError naming the first problem)."""
    try:
        too_big = os.lstat(path).st_size > MAX_IMPORT_BYTES
        data = b"" if too_big else read_regular(path)
    except OSError as e:
        raise TuneError(f"cannot read {path}: {e.strerror or e}", loc=None) from None
    if too_big or len(data) > MAX_IMPORT_BYTES:
        raise TuneError(f"{path} is larger than a tuning export may be ({MAX_IMPORT_BYTES} "
                        f"bytes)", loc=None)
    try:
        doc = _loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TuneError(f"{path} is not a tuning export (not JSON: {e})", loc=None) from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise TuneError(f"{path} is not a tuning export (format {EXPORT_FORMAT!r})", loc=None)
    if doc.get("version") != int(SCHEMA_VERSION):
        raise TuneError(f"{path}: export version {doc.get('version')!r:.20}, this tilenest "
                        f"reads {SCHEMA_VERSION}", loc=None)
    for part in ("keys", "samples", "winners"):
        if not isinstance(doc.get(part), list):
            raise TuneError(f"{path}: {part!r} must be a list", loc=None)
    keys: dict[str, TuneKey] = {}
    for i, item in enumerate(doc["keys"]):
        where = f"{path}: keys[{i}]"
        if not isinstance(item, dict) or set(item) != {"digest", "fields"}:
            raise TuneError(f"{where} must have exactly digest and fields", loc=None)
        key = _in(where, TuneKey.from_fields, item["fields"])
        if key.digest() != item["digest"]:
            raise TuneError(f"{where}: the digest does not match its fields", loc=None)
        keys[key.digest()] = key
    samples = []
    fields_ = {"uid", "key", "candidate", "status", "seconds", "predicted", "terms", "error",
               "role", "created"}
    for i, item in enumerate(doc["samples"]):
        where = f"{path}: samples[{i}]"
        if not isinstance(item, dict) or set(item) - {"features"} != fields_:
            raise TuneError(f"{where} must have exactly the fields {sorted(fields_)} (and "
                            f"optionally features)", loc=None)
        if item["key"] not in keys:
            raise TuneError(f"{where}: key {item['key']!r:.70} is not among the file's keys",
                            loc=None)
        candidate = _in(where, TuneCandidate.from_data, item["candidate"])
        _same_target(where, candidate, keys[item["key"]])
        samples.append(_in(where, lambda it=item, c=candidate: _sample_row(
            it["key"], c, **{k: it[k] for k in fields_ - {"key", "candidate"}},
            features=it.get("features"))))
    ok = {(s["key"], s["candidate"]) for s in samples if s["status"] == "ok"}
    winners = []
    for i, item in enumerate(doc["winners"]):
        where = f"{path}: winners[{i}]"
        if not isinstance(item, dict) or set(item) != {"key", "candidate", "seconds",
                                                       "created"}:
            raise TuneError(f"{where} must have exactly key, candidate, seconds, created",
                            loc=None)
        if item["key"] not in keys:
            raise TuneError(f"{where}: its key is not among the file's keys", loc=None)
        candidate = _in(where, TuneCandidate.from_data, item["candidate"])
        _same_target(where, candidate, keys[item["key"]])
        text = candidate.to_json()
        if (item["key"], text) not in ok:
            raise TuneError(f"{where}: the winner has no ok sample in the file", loc=None)
        winners.append((item["key"], text,
                        _in(where, _finite, item["seconds"], "seconds", positive=True),
                        _in(where, _finite, item["created"], "created")))
    now = time.time()
    return [(k, now) for k in keys.values()], samples, winners


def _in(where: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args)` with a TuneError's message prefixed by where it happened."""
    try:
        return fn(*args, **kwargs)
    except TuneError as e:
        raise TuneError(f"{where}: {e.plain_message}", loc=None) from None


def _same_target(where: str, candidate: TuneCandidate, key: TuneKey) -> None:
    if candidate.target != key.target:
        raise TuneError(f"{where}: a {candidate.target} candidate under a {key.target} key",
                        loc=None)
