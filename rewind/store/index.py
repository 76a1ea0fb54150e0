"""SQLite index of a replay store: store-level metadata plus one row per committed episode.

The row insert is the commit point of an episode. The database runs in WAL mode, so readers in
other processes see new rows without blocking the writer. A committed row survives a process
kill with any ``synchronous`` setting; with ``synchronous=FULL`` (``sync_every_commit=True``) it
also survives a power cut, with ``NORMAL`` (default) a power cut may roll back the last commits
but never corrupts the index.

Schema 2 added the ``content_sha256`` column. A schema-1 index opened for writing is migrated in
one transaction (``ALTER TABLE`` + version bump); opened read-only it is read as it is, with no
hashes. Every row is checked when read: a damaged one raises a one-line :class:`StoreError`
naming the episode instead of a traceback.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewind.store.episode_file import EPISODE_DIR
from rewind.store.schema import (
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    SOURCES,
    EpisodeInfo,
    StoreError,
    StoreSpec,
)

logger = logging.getLogger(__name__)

INDEX_NAME = "index.sqlite"

_DDL = """
CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    id INTEGER PRIMARY KEY,
    file TEXT NOT NULL UNIQUE,
    length INTEGER NOT NULL CHECK (length > 0),
    env_id TEXT NOT NULL,
    seed INTEGER,
    policy_version TEXT NOT NULL,
    round INTEGER NOT NULL,
    success INTEGER,
    n_operator_steps INTEGER NOT NULL,
    extra TEXT NOT NULL,
    source_counts TEXT NOT NULL,
    created_at REAL NOT NULL,
    content_sha256 TEXT
);
"""

_COLUMNS = (
    "id, file, length, env_id, seed, policy_version, round, success, n_operator_steps, "
    "extra, source_counts, created_at, content_sha256"
)
#: The same columns on a schema-1 index (read-only: not migrated), which has no hash column.
_COLUMNS_V1 = _COLUMNS.replace("content_sha256", "NULL")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def create_index(path: Path, spec: StoreSpec) -> sqlite3.Connection:
    """Create a fresh index at ``path`` holding ``spec`` and :data:`SCHEMA_VERSION`."""
    conn = _connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(_DDL)
    meta = {"schema_version": str(SCHEMA_VERSION), "spec": spec.to_json(), "created_at": repr(time.time())}
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO store_meta (key, value) VALUES (?, ?)", sorted(meta.items()))
    conn.execute("COMMIT")
    return conn


def open_index(
    path: Path, sync_every_commit: bool = False, writable: bool = False
) -> tuple[sqlite3.Connection, StoreSpec, bool]:
    """Open an existing index; check its schema version and return it with the stored spec.

    ``sync_every_commit`` selects ``PRAGMA synchronous = FULL`` (else ``NORMAL``). ``writable``
    (the caller holds the writer lock) migrates a schema-1 index to the current schema.

    Returns:
        ``(connection, spec, hashed)``; ``hashed`` is False for a schema-1 index opened read-only
        (no ``content_sha256`` column: pass it to :func:`fetch_rows`).

    Raises:
        StoreError: if the file is not an SQLite database, lacks the store tables, or has a
            ``schema_version`` this code cannot read.
    """
    conn = _connect(path)
    try:
        conn.execute(f"PRAGMA synchronous = {'FULL' if sync_every_commit else 'NORMAL'}")
        rows = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
        conn.execute("SELECT id FROM episodes LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path}: corrupt or foreign index database ({exc})") from exc
    version = rows.get("schema_version")
    if version not in {str(v) for v in READABLE_SCHEMA_VERSIONS}:
        conn.close()
        raise StoreError(
            f"{path}: schema_version is {version!r}, this code reads {SCHEMA_VERSION} (and migrates 1)"
        )
    try:
        spec = StoreSpec.from_json(rows["spec"])
    except (KeyError, ValueError, TypeError) as exc:
        conn.close()
        raise StoreError(f"{path}: store_meta 'spec' is missing or invalid ({exc})") from exc
    if version == "1" and writable:
        try:
            _migrate_v1(conn, path)
        except BaseException:
            conn.close()
            raise
        version = str(SCHEMA_VERSION)
    return conn, spec, version != "1"


def _migrate_v1(conn: sqlite3.Connection, path: Path) -> None:
    """Schema 1 -> 2 in one transaction: add the hash column (NULL for old rows), bump the version."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE episodes ADD COLUMN content_sha256 TEXT")
        conn.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute(
            "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('migrated_from_1_at', ?)",
            (repr(time.time()),),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    logger.warning(
        "%s: migrated the index from schema 1 to %d; episodes written before have no content "
        "hash and read as 'unverified'",
        path,
        SCHEMA_VERSION,
    )


def row_to_info(row: tuple) -> EpisodeInfo:
    """Parse one ``episodes`` row; raise a one-line :class:`StoreError` naming the episode if damaged."""
    (eid, file, length, env_id, seed, pv, rnd, success, n_op, extra, counts, created, digest) = row
    try:
        extra = _json_object("extra", extra)
        counts = _json_object("source_counts", counts)
        unknown = sorted(set(counts) - set(SOURCES))
        if unknown:
            raise ValueError(f"source_counts names unknown source(s) {unknown}; known: {list(SOURCES)}")
        if not all(isinstance(n, int) and n >= 0 for n in counts.values()) or sum(counts.values()) != length:
            raise ValueError(f"source_counts {counts} do not add up to the length {length}")
        if not (isinstance(file, str) and Path(file).parent == Path(EPISODE_DIR) and file.endswith(".h5")):
            raise ValueError(f"file {file!r} is not an {EPISODE_DIR}/*.h5 name")
        for name, value in (("seed", seed), ("round", rnd), ("n_operator_steps", n_op)):
            if not (isinstance(value, int) or (name == "seed" and value is None)):
                raise ValueError(f"{name} {value!r} is not an integer")
        if success not in (None, 0, 1) or not isinstance(env_id, str) or not isinstance(pv, str):
            raise ValueError(f"success/env_id/policy_version have invalid values {(success, env_id, pv)!r}")
        if digest is not None and not (isinstance(digest, str) and _HEX64.match(digest)):
            raise ValueError(f"content_sha256 {digest!r} is not a sha256 hex digest")
    except ValueError as exc:
        raise StoreError(f"episode {eid}: damaged index row: {exc}") from None
    return EpisodeInfo(
        id=eid,
        length=length,
        env_id=env_id,
        seed=seed,
        policy_version=pv,
        round=rnd,
        success=None if success is None else bool(success),
        n_operator_steps=n_op,
        extra=extra,
        source_counts=counts,
        created_at=created,
        file=file,
        content_sha256=digest,
    )


def _json_object(column: str, text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{column} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{column} is JSON {type(value).__name__}, expected an object")
    return value


def iter_rows(
    conn: sqlite3.Connection, after_id: int = -1, hashed: bool = True
) -> Iterator[tuple[int, EpisodeInfo | StoreError]]:
    """``(id, info or the StoreError describing its damage)`` for every row with ``id > after_id``."""
    cols = _COLUMNS if hashed else _COLUMNS_V1
    cur = conn.execute(f"SELECT {cols} FROM episodes WHERE id > ? ORDER BY id", (after_id,))
    for row in cur.fetchall():
        try:
            yield row[0], row_to_info(row)
        except StoreError as exc:
            yield row[0], exc


def fetch_rows(conn: sqlite3.Connection, after_id: int = -1, hashed: bool = True) -> list[EpisodeInfo]:
    """All committed episodes with ``id > after_id``, in id order (``hashed``: see :func:`open_index`).

    Raises:
        StoreError: for the first damaged row (``episode <id>: damaged index row: ...``).
    """
    out = []
    for _, item in iter_rows(conn, after_id, hashed):
        if isinstance(item, StoreError):
            raise StoreError(f"{item}; run `rewind-store verify` to list every problem")
        out.append(item)
    return out


def next_episode_id(conn: sqlite3.Connection) -> int:
    """The id the next committed episode will get (ids are 0, 1, 2, ...)."""
    (max_id,) = conn.execute("SELECT MAX(id) FROM episodes").fetchone()
    return 0 if max_id is None else max_id + 1


def committed_files(conn: sqlite3.Connection) -> set[str]:
    """File names (relative to the store root) referenced by committed rows."""
    return {f for (f,) in conn.execute("SELECT file FROM episodes")}


def insert_row(
    conn: sqlite3.Connection,
    eid: int,
    file: str,
    length: int,
    meta: dict[str, Any],
    counts: dict,
    content_sha256: str,
) -> None:
    """Insert one episode row in a single transaction: this is the commit point."""
    success = None if meta["success"] is None else int(meta["success"])
    values = (
        eid,
        file,
        length,
        meta["env_id"],
        meta["seed"],
        meta["policy_version"],
        meta["round"],
        success,
        meta["n_operator_steps"],
        json.dumps(meta["extra"], sort_keys=True),
        json.dumps(counts, sort_keys=True),
        time.time(),
        content_sha256,
    )
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"INSERT INTO episodes ({_COLUMNS}) VALUES ({', '.join('?' * len(values))})", values)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def row_exists(conn: sqlite3.Connection, eid: int) -> bool:
    """True when episode ``eid`` has a committed row."""
    return conn.execute("SELECT 1 FROM episodes WHERE id = ?", (eid,)).fetchone() is not None
