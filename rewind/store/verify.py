"""``rewind-store verify``: check every committed episode of a store, read-only.

For each index row: the row parses (JSON columns, known source names), the file exists and holds
that episode id and the row's metadata, every array has the spec shape/dtype and finite values,
and the content hash recorded at commit matches (episodes written before schema 2 have none and
are listed as unverified, not as problems). Also runs SQLite's ``quick_check`` on the index and
lists episode files without an index row (``episodes/``) and those already moved aside
(``orphans/``). Never writes to the store, so it may run next to a live writer.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from rewind.store import index as idx
from rewind.store.episode_file import EPISODE_DIR, read_episode_file
from rewind.store.orphans import orphan_summary
from rewind.store.schema import StoreError
from rewind.store.store import check_store_folder

logger = logging.getLogger(__name__)


def verify_store(path: str | os.PathLike) -> dict[str, Any]:
    """Check the store at ``path``; return a JSON-able report (never raises for damaged episodes).

    Returns:
        ``path``, ``episodes`` (rows checked), ``verified`` (hash-checked count), ``unverified``
        (ids without a content hash), ``problems`` (list of ``{"episode", "file", "problem"}``;
        ``episode`` is ``None`` for store-level problems), ``uncommitted_files`` (``episodes/``
        files without a row), ``orphans`` (see :func:`rewind.store.orphans.orphan_summary`) and
        ``ok`` (no problems).

    Raises:
        StoreError: if ``path`` is not a store or its index cannot be opened at all.
    """
    root = Path(path)
    conn, spec, hashed = idx.open_index(check_store_folder(root))
    report: dict[str, Any] = {"path": str(root), "episodes": 0, "verified": 0, "unverified": []}
    problems: list[dict[str, Any]] = []
    committed: set[str] = set()
    try:
        check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        if check != ["ok"]:
            problems.append({"episode": None, "file": idx.INDEX_NAME, "problem": "; ".join(check)[:500]})
        for eid, item in idx.iter_rows(conn, hashed=hashed):
            report["episodes"] += 1
            if isinstance(item, StoreError):
                problems.append({"episode": eid, "file": idx.INDEX_NAME, "problem": str(item)})
                continue
            committed.add(Path(item.file).name)
            try:
                _, verified = read_episode_file(root, item, spec)
            except StoreError as exc:
                problems.append({"episode": eid, "file": item.file, "problem": str(exc)})
                continue
            if verified:
                report["verified"] += 1
            else:
                report["unverified"].append(eid)
    except sqlite3.DatabaseError as exc:
        problems.append({"episode": None, "file": idx.INDEX_NAME, "problem": f"index unreadable ({exc})"})
    finally:
        conn.close()
    report["problems"] = problems
    report["uncommitted_files"] = sorted(
        p.name for p in (root / EPISODE_DIR).iterdir() if p.suffix == ".h5" and p.name not in committed
    )
    report["orphans"] = orphan_summary(root)
    report["ok"] = not problems
    _log(report)
    return report


def _log(report: dict[str, Any]) -> None:
    for p in report["problems"]:
        logger.error("%s", p["problem"] if p["episode"] is not None else f"{p['file']}: {p['problem']}")
    if report["unverified"]:
        logger.warning(
            "%d episode(s) have no content hash (written before schema 2) and are unverified: %s",
            len(report["unverified"]),
            _ids(report["unverified"]),
        )
    if report["uncommitted_files"]:
        logger.warning(
            "%d episode file(s) in %s/ have no index row (moved aside by the next writer): %s",
            len(report["uncommitted_files"]),
            EPISODE_DIR,
            ", ".join(report["uncommitted_files"]),
        )


def _ids(ids: list[int], limit: int = 20) -> str:
    text = ", ".join(str(i) for i in ids[:limit])
    return text + (f", ... (+{len(ids) - limit})" if len(ids) > limit else "")


def verify_failure_message(report: dict[str, Any]) -> str:
    """One line summarising a failed :func:`verify_store` report (the first problem quoted)."""
    problems = report["problems"]
    bad = sorted({p["episode"] for p in problems if p["episode"] is not None})
    first = problems[0]["problem"]
    return (
        f"verify: {len(problems)} problem(s) in {report['path']} ({len(bad)} of {report['episodes']} "
        f"episodes: {_ids(bad)}); first: {first}"
    )
