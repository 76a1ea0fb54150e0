"""The crash-safe, append-only replay store: :class:`ReplayStore` and :class:`EpisodeWriter`.

Folder layout::

    <root>/index.sqlite        SQLite (WAL): store_meta (schema version, spec) + episodes rows
    <root>/episodes/ep_*.h5    one HDF5 file per committed episode
    <root>/episodes/.tmp-*     in-flight writes (removed when a writer opens the store)
    <root>/orphans/<time>-<pid>/ episode files without an index row, moved aside by a writer
    <root>/writer.lock         flock held by the single writer process

Commit protocol of an episode: validate everything in memory, hash it, write the HDF5 file under
a temp name, flush + fsync, ``os.replace`` to ``ep_<id>.h5``, fsync the folder, then insert the
index row (with the content hash) in one transaction. Readers only see episodes that have a row,
so an episode appears atomically; a file without a row (writer killed between rename and insert,
or an index rolled back) is invisible and moved aside by the next writer, and its id is never
reused (``rewind.store.orphans``). Every :meth:`ReplayStore.load` checks the content hash. A commit
the filesystem refuses (a full disk) is a one-line :class:`StoreError` naming the store and the episode.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rewind.store import index as idx
from rewind.store.episode_file import EPISODE_DIR, read_episode_file, write_episode_file
from rewind.store.orphans import OrphanReport, max_file_id, move_orphans
from rewind.store.schema import (
    SCHEMA_VERSION,
    SOURCES,
    Episode,
    EpisodeInfo,
    StoreError,
    StoreSpec,
    normalize_meta,
    source_code,
    validate_episode_arrays,
)
from rewind.store.writer import EpisodeWriter

logger = logging.getLogger(__name__)

LOCK_NAME = "writer.lock"


class ReplayStore:
    """Append-only episode store. Build it with :meth:`create`, :meth:`open` or :meth:`open_or_create`.

    One process at a time may open a store for writing (``mode="a"``); any number of processes
    may read (``mode="r"``) concurrently and call :meth:`refresh` to see new episodes. An instance
    is not thread-safe.
    """

    def __init__(
        self, root: Path, conn: Any, spec: StoreSpec, mode: str, lock_fd: int | None, hashed: bool = True
    ) -> None:
        """Internal; use the classmethods."""
        self._root = root
        self._conn = conn
        self._spec = spec
        self._mode = mode
        self._lock_fd = lock_fd
        self._hashed = hashed
        self._infos: dict[int, EpisodeInfo] = {}
        self._min_next_id = 0
        #: What the last writer open moved aside (``None`` for readers).
        self.orphan_report: OrphanReport | None = None
        self.refresh()

    # ----------------------------------------------------------------- construction
    @classmethod
    def create(cls, path: str | os.PathLike, spec: StoreSpec, sync_every_commit: bool = False) -> ReplayStore:
        """Create a new store at ``path`` (a missing or empty folder) and open it for appending.

        ``sync_every_commit``: see :meth:`open`.

        The store is assembled in a sibling temp folder and renamed into place, so a crash during
        creation never leaves a half-made store. Raises :class:`StoreError` if anything is there.
        """
        root = Path(path)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise StoreError(f"path: {root} already exists and is not empty; refusing to create a store")
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = root.parent / f".{root.name}.creating-{uuid.uuid4().hex}"
        try:
            (staging / EPISODE_DIR).mkdir(parents=True)
            idx.create_index(staging / idx.INDEX_NAME, spec).close()
            os.rename(staging, root)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise StoreError(f"path: cannot create a store at {root} ({exc})") from exc
        logger.info("created replay store at %s (schema %d)", root, SCHEMA_VERSION)
        return cls.open(root, mode="a", sync_every_commit=sync_every_commit)

    @classmethod
    def open(
        cls, path: str | os.PathLike, mode: Literal["r", "a"] = "r", sync_every_commit: bool = False
    ) -> ReplayStore:
        """Open an existing store for reading (``"r"``) or appending (``"a"``).

        Opening with ``"a"`` takes the writer lock, migrates a schema-1 index, deletes temp files
        of killed writers and moves episode files without an index row into ``orphans/`` (logged
        as a warning; their ids are never reused, see :mod:`rewind.store.orphans`).

        Every commit survives the writer process being killed. Episode files are always fsynced
        before their row is written; ``sync_every_commit=True`` also fsyncs the index on every
        commit (SQLite ``synchronous=FULL``, one more fsync per episode), so that commits survive
        a power cut too. Without it a power cut may drop the last few commits, never more.

        Raises:
            StoreError: if the store is missing, corrupt, of another schema version, or (``"a"``)
                already open by another writer.
        """
        if mode not in ("r", "a"):
            raise StoreError(f"mode: must be 'r' or 'a', got {mode!r}")
        root = Path(path)
        db = check_store_folder(root)
        lock_fd = _acquire_writer_lock(root) if mode == "a" else None
        try:
            conn, spec, hashed = idx.open_index(db, sync_every_commit, writable=mode == "a")
        except BaseException:
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        try:
            store = cls(root, conn, spec, mode, lock_fd, hashed)
        except BaseException:
            conn.close()
            if lock_fd is not None:
                os.close(lock_fd)
            raise
        if mode == "a":
            try:
                store._move_orphans()
            except BaseException:
                store.close()
                raise
        return store

    @classmethod
    def open_or_create(
        cls, path: str | os.PathLike, spec: StoreSpec, sync_every_commit: bool = False
    ) -> ReplayStore:
        """Open the store at ``path`` for appending, creating it if absent (``sync_every_commit``: see
        :meth:`open`).

        Raises:
            StoreError: if a store exists whose spec differs from ``spec`` (names each field).
        """
        root = Path(path)
        if not (root / idx.INDEX_NAME).exists():
            return cls.create(root, spec, sync_every_commit)
        store = cls.open(root, mode="a", sync_every_commit=sync_every_commit)
        diffs = store.spec.diff(spec)
        if diffs:
            store.close()
            raise StoreError(f"spec mismatch with existing store at {root}: " + "; ".join(diffs))
        return store

    def _move_orphans(self) -> None:
        committed = {Path(f).name for f in idx.committed_files(self._conn)}
        try:
            self.orphan_report = move_orphans(self._root, committed)
        except OSError as exc:
            raise StoreError(
                f"path: cannot move uncommitted episode files aside in {self._root} ({exc})"
            ) from exc
        self._min_next_id = max_file_id(self._root) + 1

    # ----------------------------------------------------------------- properties
    @property
    def spec(self) -> StoreSpec:
        """The store's :class:`StoreSpec`."""
        return self._spec

    @property
    def path(self) -> Path:
        """Root folder of the store."""
        return self._root

    @property
    def mode(self) -> str:
        """``"r"`` or ``"a"``."""
        return self._mode

    def __len__(self) -> int:
        """Number of committed episodes seen so far (see :meth:`refresh`)."""
        return len(self._infos)

    def __repr__(self) -> str:
        return f"ReplayStore({str(self._root)!r}, mode={self._mode!r}, episodes={len(self)})"

    # ----------------------------------------------------------------- reading
    def refresh(self) -> list[EpisodeInfo]:
        """Pick up episodes committed since the last call (e.g. by another process); return them."""
        self._check_open()
        last = max(self._infos, default=-1)
        new = idx.fetch_rows(self._conn, after_id=last, hashed=self._hashed)
        for info in new:
            self._infos[info.id] = info
        return new

    def episodes(self, success: bool | None = None, source: str | None = None) -> list[EpisodeInfo]:
        """Committed episodes in id order, optionally filtered.

        Args:
            success: keep only episodes whose ``success`` equals this (``None``: no filter).
            source: keep only episodes with at least one step of this source label.
        """
        if source is not None:
            source = SOURCES[source_code(source)]
        success = None if success is None else bool(success)
        out = []
        for info in self._infos.values():
            if success is not None and info.success is not success:
                continue
            if source is not None and not info.source_counts.get(source):
                continue
            out.append(info)
        return out

    def info(self, episode_id: int) -> EpisodeInfo:
        """Index row of one episode (refreshes once if the id is not known yet)."""
        if episode_id not in self._infos:
            self.refresh()
        if episode_id not in self._infos:
            raise StoreError(f"episode_id: no committed episode {episode_id!r} in {self._root}")
        return self._infos[episode_id]

    def load(self, episode_id: int, obs_keys: Sequence[str] | None = None, verify: bool = True) -> Episode:
        """Load one committed episode into memory (``obs_keys`` restricts the observations read).

        Shapes, dtypes, finiteness and source codes are always checked; with ``verify`` (default)
        also the episode id, the metadata and the content hash recorded at commit (episodes
        written before schema 2 have none and load unverified).

        Raises:
            StoreError: ``episode <id> (<file>): <problem>`` for a missing, swapped or changed file.
        """
        info = self.info(episode_id)
        data, _ = read_episode_file(self._root, info, self._spec, obs_keys, verify)
        return Episode(info=info, **data)

    def summary(self) -> dict[str, Any]:
        """Counts: episodes, steps, steps by source, success count/rate, operator steps, per env."""
        infos = list(self._infos.values())
        by_source = dict.fromkeys(SOURCES, 0)
        per_env: dict[str, dict[str, int]] = {}
        for info in infos:
            for name, n in info.source_counts.items():
                by_source[name] += n
            env = per_env.setdefault(info.env_id, {"episodes": 0, "steps": 0, "successes": 0})
            env["episodes"] += 1
            env["steps"] += info.length
            env["successes"] += int(info.success is True)
        n_success = sum(info.success is True for info in infos)
        return {
            "episodes": len(infos),
            "steps": sum(info.length for info in infos),
            "steps_by_source": by_source,
            "successes": n_success,
            "failures": sum(info.success is False for info in infos),
            "success_rate": n_success / len(infos) if infos else None,
            "n_operator_steps": sum(info.n_operator_steps for info in infos),
            "per_env": dict(sorted(per_env.items())),
        }

    # ----------------------------------------------------------------- writing
    def episode(self, **meta: Any) -> EpisodeWriter:
        """Start a step-by-step episode; use as a context manager (commit on clean exit).

        ``meta`` takes the keys of :func:`rewind.store.schema.normalize_meta`
        (``seed``, ``policy_version``, ``round``, ``success``, ``n_operator_steps``, ``extra``, ``env_id``).
        """
        self._check_writable()
        return EpisodeWriter(self, meta)

    def add_episode(
        self,
        obs: Mapping[str, np.ndarray],
        actions: np.ndarray,
        states: np.ndarray,
        sources: Sequence[str | int] | np.ndarray,
        rewards: np.ndarray | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> EpisodeInfo:
        """Validate and commit a whole episode at once.

        Args:
            obs: key -> ``[T, *shape]`` (keys, shapes and dtypes as in the spec).
            actions: float ``[T, Da]``. states: float64 ``[T, Ds]``. rewards: ``[T]`` (default zeros).
            sources: ``T`` labels from :data:`SOURCES` (or their codes).
            meta: per-episode metadata (see :meth:`episode`).

        Returns:
            The committed episode's :class:`EpisodeInfo`. On any :class:`StoreError` nothing is written.
        """
        self._check_writable()
        n = np.shape(actions)[0] if np.ndim(actions) else 0
        rewards = np.zeros(n, np.float32) if rewards is None else rewards
        arrays = validate_episode_arrays(self._spec, obs, actions, states, sources, rewards)
        return self._commit(arrays, dict(meta or {}))

    def _commit(self, arrays: dict[str, Any], meta: dict[str, Any]) -> EpisodeInfo:
        length = int(arrays["actions"].shape[0])
        meta = normalize_meta(meta, self._spec, length)
        codes, counts = np.unique(arrays["sources"], return_counts=True)
        source_counts = {SOURCES[c]: int(n) for c, n in zip(codes, counts, strict=True)}
        eid = max(idx.next_episode_id(self._conn), self._min_next_id)
        try:
            rel, digest = write_episode_file(self._root, eid, self._spec, arrays, meta)
            try:
                idx.insert_row(self._conn, eid, rel, length, meta, source_counts, digest)
            except BaseException:
                self._drop_uncommitted(eid, rel)
                raise
        except (OSError, sqlite3.OperationalError) as exc:  # a full disk, a lost mount, a read-only folder
            raise StoreError(self._not_committed(eid, meta, exc)) from exc
        self._min_next_id = eid + 1
        self.refresh()
        return self._infos[eid]

    def _not_committed(self, eid: int, meta: dict[str, Any], exc: BaseException) -> str:
        """The one-line message of a commit the filesystem refused (``exc``)."""
        seed = f" (seed {meta['seed']})" if meta.get("seed") is not None else ""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        reason = (reason.strip().splitlines() or [type(exc).__name__])[0]
        return (
            f"store {self._root}: episode {eid}{seed} was not committed ({reason}); "
            f"the {len(self._infos)} episode(s) committed before are intact"
        )

    def _drop_uncommitted(self, eid: int, rel: str) -> None:
        """After a failed insert: delete the file only if its row surely does not exist."""
        try:
            committed = idx.row_exists(self._conn, eid)
        except sqlite3.Error:
            committed = True  # unknown: leave the file, the next writer moves it aside if uncommitted
        if committed:
            self._min_next_id = eid + 1
        else:
            (self._root / rel).unlink(missing_ok=True)

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the index connection and release the writer lock (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> ReplayStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._conn is None:
            raise StoreError(f"store {self._root} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._mode != "a":
            raise StoreError(f"mode: store {self._root} is open read-only; open it with mode='a' to append")


def check_store_folder(root: Path) -> Path:
    """Return the index path of the store at ``root``; raise :class:`StoreError` if it is not a store."""
    db = root / idx.INDEX_NAME
    if not root.is_dir():
        raise StoreError(f"path: no replay store at {root} (folder missing)")
    if not db.is_file() or not (root / EPISODE_DIR).is_dir():
        raise StoreError(f"path: {root} is not a replay store (missing {idx.INDEX_NAME} or {EPISODE_DIR}/)")
    return db


def _acquire_writer_lock(root: Path) -> int:
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreError(f"mode: another process already has {root} open for writing") from exc
    return fd
