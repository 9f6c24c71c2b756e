"""The tuning database: raw samples and winners per structural key, in SQLite (DESIGN §3a).

One file, `component_dir("tune")/tuning.sqlite3`, in WAL mode with a 10 s busy timeout, so
several processes may measure and read at once. Trust and integrity follow the other caches,
through runtime/cache.py's checks: the directory must be this user's and not writable by
others, the file must be a regular file of this user (a symlink is refused), and `PRAGMA
quick_check` runs on open; a file that is not SQLite, or fails the check, is moved aside with
a warning and a new one is made (a plain call never crashes on it). Connections are per
process (a forked child opens its own) and serialized by a lock within one. Records are
validated and decoded by tune/records.py (through `TuneCandidate.from_json` and
`TuneKey.from_fields`, never eval or pickle), and an import is validated whole before one
transaction writes it.

Invariant kept by SQL triggers as well as by `set_winner`: a winner is a candidate with an
`ok` sample under its key and no failed one (a failure recorded later drops the winner).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilenest.errors import TuneError
from tilenest.runtime.cache import component_dir, create_private, file_problem, secure_directory
from tilenest.tune.candidate import TuneCandidate
from tilenest.tune.key import TuneKey
from tilenest.tune.paths import DB_NAME as DB_NAME
from tilenest.tune.records import (
    EXPORT_FORMAT,
    ROLES,
    SCHEMA_VERSION,
    STATUSES,
    dumps,
    finite,
    loads,
    parse_export,
    sample_row,
)

BUSY_TIMEOUT_MS = 10_000
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6

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
# The file


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
        problem = file_problem(self.path)
        if problem is not None:
            raise TuneError(f"tuning database {self.path} is refused: {problem}", loc=None)
        _LIVE.add(self)
        with self._lock:
            self._connection()

    @classmethod
    def default(cls, create: bool = True) -> TuningDB | None:
        """The database under the cache directory; None when the directory or file is
        refused (with a warning), or when `create` is False and there is no file yet."""
        root = component_dir("tune")
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
            create_private(self.path)
        except OSError as e:
            raise TuneError(f"tuning database {self.path} cannot be created: "
                            f"{e.strerror or e}", loc=None) from None
        problem = file_problem(self.path)
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
        row = sample_row(key.digest(), candidate, status=status, seconds=seconds,
                          predicted=predicted, terms=terms, error=error, role=role,
                          created=time.time(), uid=secrets.token_hex(16), features=features)
        with self._use() as conn, _transaction(conn):
            _insert_key(conn, key, row["created"])
            _insert_sample(conn, row)

    def set_winner(self, key: TuneKey, candidate: TuneCandidate, seconds: float) -> None:
        """Make `candidate` the key's winner: it needs an ok sample and no failed one."""
        seconds = finite(seconds, "the winner's seconds", positive=True)
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
        return [Sample(key=loads(f), digest=d, candidate=TuneCandidate.from_json(c),
                       status=st, seconds=tuple(loads(sec)), median=med, predicted=pred,
                       terms=None if terms is None else loads(terms), error=err, role=role,
                       created=created, uid=uid,
                       features=None if feats is None else loads(feats))
                for f, d, c, st, sec, med, pred, terms, err, role, created, uid, feats in rows]

    def entries(self) -> list[Entry]:
        with self._use() as conn:
            rows = conn.execute(
                "SELECT k.digest, k.fields, w.candidate, w.seconds, "
                "(SELECT count(*) FROM samples s WHERE s.key = k.digest) "
                "FROM keys k LEFT JOIN winners w ON w.key = k.digest "
                "ORDER BY k.created, k.digest").fetchall()
        return [Entry(digest, loads(fields),
                      None if cand is None else (TuneCandidate.from_json(cand), float(sec)),
                      count)
                for digest, fields, cand, sec, count in rows]

    # -- sharing
    def export(self, path: Path) -> int:
        """Write every key, sample and winner to a JSON file; the number of samples and
        winners written."""
        with self._use() as conn:
            keys = [{"digest": d, "fields": loads(f)} for d, f in conn.execute(
                "SELECT digest, fields FROM keys ORDER BY created, digest")]
            samples = [{"uid": uid, "key": key, "candidate": loads(cand), "status": status,
                        "seconds": loads(sec), "predicted": pred,
                        "terms": None if terms is None else loads(terms), "error": err,
                        "role": role, "created": created,
                        "features": None if feats is None else loads(feats)}
                       for uid, key, cand, status, sec, pred, terms, err, role, created, feats
                       in conn.execute("SELECT uid, key, candidate, status, seconds, "
                                       "predicted, terms, error, role, created, features "
                                       "FROM samples ORDER BY id")]
            winners = [{"key": key, "candidate": loads(cand), "seconds": sec,
                        "created": created} for key, cand, sec, created in conn.execute(
                            "SELECT key, candidate, seconds, created FROM winners "
                            "ORDER BY key")]
        doc = {"format": EXPORT_FORMAT, "version": int(SCHEMA_VERSION), "keys": keys,
               "samples": samples, "winners": winners}
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(dumps(doc) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return len(samples) + len(winners)

    def import_(self, path: Path) -> int:
        """Add the records of an exported file (validated whole first: a hostile or broken
        file is a TuneError and nothing is written). Samples already present (same id) are
        skipped; a winner replaces the stored one only when it measured faster. Returns the
        number of samples and winners added or replaced."""
        keys, samples, winners = parse_export(Path(path))
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
                 "VALUES (?, ?, ?, ?)", (key.digest(), dumps(key.fields()), key.target,
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


def _insert_sample(conn: sqlite3.Connection, row: dict[str, Any],
                   ignore_existing: bool = False) -> int:
    verb = "INSERT OR IGNORE" if ignore_existing else "INSERT"
    return conn.execute(
        f"{verb} INTO samples (uid, key, candidate, status, seconds, median, predicted, "
        f"terms, error, role, created, features) VALUES (:uid, :key, :candidate, :status, "
        f":seconds, :median, :predicted, :terms, :error, :role, :created, :features)",
        row).rowcount
