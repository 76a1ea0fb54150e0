"""Atomic file writes: a reader never sees a half-written file.

Every helper writes to a temporary file in the destination folder, fsyncs it, ``os.replace``-s it
over the destination (atomic on POSIX when both are on one file system) and fsyncs the folder, so the
rename itself survives a power loss.
The temporary file comes from :func:`tempfile.mkstemp`, so every file written here is readable by
its owner only (mode 0600); :func:`private_opener` gives files opened for appending the same mode.
A write the filesystem refuses for lack of space (``ENOSPC``, ``EDQUOT``) is a one-line
:class:`DiskFullError` naming the file; the temporary file is removed and the destination keeps what
it held before (or stays absent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: ``errno`` values of a filesystem out of space: a full disk, an exhausted quota
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(ValueError):
    """A file the filesystem had no room for (a full disk, a quota): one line naming the file, reported
    by the commands like any user error (exit status 2). Nothing of the new content is left behind."""


def to_jsonable(obj: Any) -> Any:
    """``json.dumps`` ``default=`` hook: numpy scalars/arrays, paths, dataclasses, sets.

    Raises:
        TypeError: for objects with no sensible JSON form.
    """
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serializable")


def as_json(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples -> lists, numpy -> Python), for comparing with saved
    configs."""
    return json.loads(json.dumps(obj, default=to_jsonable))


def changed_keys(saved: Any, now: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON-like trees (a key missing on one side differs)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        keys = sorted(set(saved) | set(now))
        return [c for k in keys for c in changed_keys(saved.get(k), now.get(k), f"{prefix}{k}.")]
    return [] if saved == now else [prefix.rstrip(".")]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file's content, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def private_opener(path: str | os.PathLike[str], flags: int) -> int:
    """``open(..., opener=private_opener)``: a new file gets mode 0600, an existing one is narrowed to it.

    Narrowing is best effort (a file owned by someone else keeps its mode).
    """
    fd = os.open(path, flags, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)
    return fd


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the filesystem refusing a write for lack of space: an ``OSError`` with errno
    ``ENOSPC``/``EDQUOT``, or a library error that wraps one in its message (safetensors raises
    ``SafetensorError('... No space left on device (os error 28)')``)."""
    if isinstance(exc, OSError):
        return exc.errno in DISK_FULL
    text = str(exc)
    return any(f"(os error {code})" in text for code in DISK_FULL)


def disk_full_error(target: str | os.PathLike[str], exc: BaseException, existed: bool) -> DiskFullError:
    """The one-line :class:`DiskFullError` for ``target`` (a file or a folder) refused by ``exc``."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else os.strerror(errno.ENOSPC)
    before = "its previous content is intact" if existed else "no partial file was left"
    return DiskFullError(f"{target} was not written ({reason}); {before}")


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename inside ``folder`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_synced(fh: Any, data: bytes) -> None:
    """Write ``data`` to the open temporary file and push it to the disk (flush + fsync)."""
    fh.write(data)
    fh.flush()
    os.fsync(fh.fileno())


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + ``os.replace``); returns the path.

    The file ends up with mode 0600 (owner only), whatever mode an earlier file at ``path`` had.

    Raises:
        DiskFullError: the filesystem is out of space (``ENOSPC``/``EDQUOT``); ``path`` is as it was.
    """
    dest = Path(path)
    existed = dest.exists()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                _write_synced(fh, data)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full_error(dest, exc, existed) from exc
    fsync_dir(dest.parent)
    return dest


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`); returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> Path:
    """Serialize ``obj`` as JSON (numpy/path aware, see :func:`to_jsonable`) and write it atomically."""
    text = json.dumps(obj, indent=indent, default=to_jsonable, sort_keys=False)
    return atomic_write_text(path, text + "\n")


def atomic_save_figure(path: str | os.PathLike[str], fig: Any, dpi: int = 110) -> Path:
    """Render the matplotlib figure ``fig`` in the format ``path``'s suffix names (PNG without one) and
    write it to ``path`` atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi)
    return atomic_write_bytes(path, buf.getvalue())
