"""The one way metrics leave the program: a local ``metrics.jsonl`` plus, optionally, Weights & Biases.

    with MetricsLogger(cfg.out_dir, config=asdict(cfg), mode="offline") as metrics:
        metrics.log({"train/loss": 0.12}, step=10)
        metrics.summary({"success_rate": 0.8})

``metrics.jsonl`` (in ``out_dir``) is always written: one JSON object per line, flushed per line, with
``kind`` (log | table | image | video | summary), ``step`` and ``wall_time`` (Unix seconds) plus the
payload. W&B runs only when ``mode`` is not ``disabled``; ``offline`` (the default) writes a run
folder under ``out_dir/wandb`` and never touches the network; upload later with ``wandb sync``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from rewind.config import ConfigError, check_choice
from rewind.utils.io import DiskFullError, is_disk_full, private_opener, to_jsonable

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
RESERVED_KEYS = frozenset({"kind", "step", "wall_time"})
JSONL_NAME = "metrics.jsonl"


@dataclass
class WandbConfig:
    """Weights & Biases (through :class:`MetricsLogger`; ``metrics.jsonl`` is always kept): the
    ``wandb`` node of every command that reports metrics.

    Attributes:
        mode: ``offline`` (default: a run folder under ``out_dir/wandb``, upload with ``wandb sync``),
            ``online`` or ``disabled``.
        project: W&B project.
        group: W&B group (e.g. one per fine-tuning loop).
    """

    mode: str = "offline"
    project: str = "rewind"
    group: str | None = None

    def __post_init__(self) -> None:
        check_choice("wandb.mode", self.mode, MODES)


class MetricsLogger:
    """Append-only metrics sink for one run (local JSONL, optional W&B).

    Args:
        out_dir: run folder; ``metrics.jsonl`` and ``wandb/`` go here.
        project: W&B project.
        mode: ``offline`` (default), ``online`` or ``disabled`` (JSONL only, wandb is not imported).
        config: run configuration recorded by W&B.
        run_name: W&B run name (default: the out_dir's name).
        group: W&B group (e.g. one per fine-tuning loop).
        system_stats: let W&B sample CPU/GPU usage (off in tests).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        project: str = "rewind",
        mode: str = "offline",
        config: Mapping[str, Any] | None = None,
        run_name: str | None = None,
        group: str | None = None,
        system_stats: bool = True,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"metrics mode must be one of {', '.join(MODES)}; got '{mode}'")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self.path = self.out_dir / JSONL_NAME
        self._lock = threading.Lock()
        self._fh = open(self.path, "ab", buffering=0, opener=private_opener)  # noqa: SIM115 (mode 0600)
        self._last_step = -1
        self._closed = False
        self._wandb: Any = None
        self._run: Any = None
        if mode != "disabled":
            self._start_wandb(project, dict(config or {}), run_name or self.out_dir.name, group, system_stats)

    def _start_wandb(
        self, project: str, config: dict[str, Any], name: str, group: str | None, system_stats: bool
    ) -> None:
        import wandb

        settings = wandb.Settings(
            console="off",
            silent=os.environ.get("WANDB_SILENT", "").lower() == "true",
            x_disable_stats=not system_stats,
        )
        config = json.loads(json.dumps(config, default=to_jsonable))
        self._wandb = wandb
        self._run = wandb.init(
            project=project,
            mode=self.mode,
            dir=str(self.out_dir),
            config=config,
            name=name,
            group=group,
            settings=settings,
            reinit="create_new",
        )
        log.info("wandb %s run in %s", self.mode, self._run.dir)

    @property
    def wandb_run(self) -> Any:
        """The W&B run, or ``None`` when ``mode == "disabled"``."""
        return self._run

    def _next_step(self, step: int | None) -> int:
        step = self._last_step + 1 if step is None else int(step)
        self._last_step = max(self._last_step, step)
        return step

    def _write(self, kind: str, step: int | None, payload: Mapping[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("MetricsLogger is closed")
        clash = RESERVED_KEYS.intersection(payload)
        if clash:
            raise ValueError(f"metric names {sorted(clash)} are reserved")
        record = {"kind": kind, "step": step, "wall_time": round(time.time(), 6), **payload}
        line = (json.dumps(record, default=to_jsonable, allow_nan=True) + "\n").encode("utf-8")
        with self._lock:
            self._append(line)

    def _append(self, data: bytes) -> None:
        """Append one whole line, or nothing: a write the disk refuses half way is cut off again, so
        ``metrics.jsonl`` never holds a partial line (raises :class:`DiskFullError` naming the file)."""
        start = self._fh.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[self._fh.write(view) :]
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            with contextlib.suppress(OSError):
                self._fh.truncate(start)
            raise DiskFullError(
                f"{self.path}: a metrics record was not written ({exc.strerror}); the records before it are intact"
            ) from exc

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record scalar (or JSON-able) metrics at ``step`` (default: previous step + 1)."""
        step = self._next_step(step)
        self._write("log", step, metrics)
        if self._run is not None:
            self._run.log(dict(metrics), step=step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        """Record a table given as a list of dicts (columns: union of keys, in first-seen order)."""
        step = self._next_step(step)
        rows = [dict(r) for r in rows]
        self._write("table", step, {"name": name, "rows": rows})
        if self._run is not None:
            columns = list(dict.fromkeys(k for r in rows for k in r))
            data = [[r.get(c) for c in columns] for r in rows]
            self._run.log({name: self._wandb.Table(columns=columns, data=data)}, step=step)

    def log_image(self, name: str, path: str | os.PathLike[str], step: int | None = None) -> None:
        """Record an image file (PNG/JPEG) already written to disk."""
        self._log_media("image", name, path, step)

    def log_video(self, name: str, path: str | os.PathLike[str], step: int | None = None) -> None:
        """Record a video file (MP4/GIF) already written to disk."""
        self._log_media("video", name, path, step)

    def _log_media(self, kind: str, name: str, path: str | os.PathLike[str], step: int | None) -> None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{kind} file not found: {path}")
        step = self._next_step(step)
        self._write(kind, step, {"name": name, "path": os.fspath(path)})
        if self._run is not None:
            media_cls = self._wandb.Image if kind == "image" else self._wandb.Video
            self._run.log({name: media_cls(os.fspath(path))}, step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        """Record final values of the run (W&B run summary)."""
        self._write("summary", None, values)
        if self._run is not None:
            self._run.summary.update(dict(values))

    def close(self) -> None:
        """Flush and close the JSONL file and finish the W&B run. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._fh.close()
        if self._run is not None:
            self._run.finish()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_metrics(path: str | os.PathLike[str], kind: str | None = None) -> list[dict[str, Any]]:
    """Load the records of a ``metrics.jsonl`` (a folder means its ``metrics.jsonl``), optionally by kind."""
    path = Path(path)
    if path.is_dir():
        path = path / JSONL_NAME
    with path.open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]
