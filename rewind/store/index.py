"""SQLite index of a replay store: store-level metadata plus one row per committed episode.

The row insert is the commit point of an episode. The database runs in WAL mode, so readers in
other processes see new rows without blocking the writer. A committed row survives a process
kill with any ``synchronous`` setting; with ``synchronous=FULL`` (``sync_every_commit=True``) it
also survives a power cut, with ``NORMAL`` (default) a power cut may roll back the last commits
but never corrupts the index.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from rewind.store.schema import SCHEMA_VERSION, EpisodeInfo, StoreError, StoreSpec

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
    created_at REAL NOT NULL
);
"""

_COLUMNS = (
    "id, file, length, env_id, seed, policy_version, round, success, n_operator_steps, "
    "extra, source_counts, created_at"
)


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


def open_index(path: Path, sync_every_commit: bool = False) -> tuple[sqlite3.Connection, StoreSpec]:
    """Open an existing index; check its schema version and return it with the stored spec.

    ``sync_every_commit`` selects ``PRAGMA synchronous = FULL`` (else ``NORMAL``).

    Raises:
        StoreError: if the file is not an SQLite database, lacks the store tables, or has another
            ``schema_version``.
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
    if version != str(SCHEMA_VERSION):
        conn.close()
        raise StoreError(f"{path}: schema_version is {version!r}, this code reads {SCHEMA_VERSION}")
    try:
        spec = StoreSpec.from_json(rows["spec"])
    except (KeyError, ValueError, TypeError) as exc:
        conn.close()
        raise StoreError(f"{path}: store_meta 'spec' is missing or invalid ({exc})") from exc
    return conn, spec


def _row_to_info(row: tuple) -> EpisodeInfo:
    (eid, file, length, env_id, seed, pv, rnd, success, n_op, extra, counts, created) = row
    return EpisodeInfo(
        id=eid,
        length=length,
        env_id=env_id,
        seed=seed,
        policy_version=pv,
        round=rnd,
        success=None if success is None else bool(success),
        n_operator_steps=n_op,
        extra=json.loads(extra),
        source_counts=json.loads(counts),
        created_at=created,
        file=file,
    )


def fetch_rows(conn: sqlite3.Connection, after_id: int = -1) -> list[EpisodeInfo]:
    """All committed episodes with ``id > after_id``, in id order."""
    cur = conn.execute(f"SELECT {_COLUMNS} FROM episodes WHERE id > ? ORDER BY id", (after_id,))
    return [_row_to_info(r) for r in cur.fetchall()]


def next_episode_id(conn: sqlite3.Connection) -> int:
    """The id the next committed episode will get (ids are 0, 1, 2, ...)."""
    (max_id,) = conn.execute("SELECT MAX(id) FROM episodes").fetchone()
    return 0 if max_id is None else max_id + 1


def committed_files(conn: sqlite3.Connection) -> set[str]:
    """File names (relative to the store root) referenced by committed rows."""
    return {f for (f,) in conn.execute("SELECT file FROM episodes")}


def insert_row(
    conn: sqlite3.Connection, eid: int, file: str, length: int, meta: dict[str, Any], counts: dict
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
    )
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"INSERT INTO episodes ({_COLUMNS}) VALUES ({', '.join('?' * 12)})", values)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
