"""Console (and optional file) logging for contexts that Hydra does not set up: library use,
notebooks, tests, and the commands themselves (which run with Hydra's job logging turned off)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import IO

from rewind.utils.io import private_opener

CONSOLE_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_MARK = "_rewind_handler"


class PrivateFileHandler(logging.FileHandler):
    """A :class:`logging.FileHandler` whose file is readable by its owner only (mode 0600)."""

    def _open(self) -> IO[str]:
        return open(  # noqa: SIM115 (the handler owns the stream and closes it)
            self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors, opener=private_opener
        )


def setup_logging(level: int | str | None = None, log_file: str | os.PathLike[str] | None = None) -> None:
    """Configure the root logger with a concise console handler and, optionally, a file handler.

    Idempotent: handlers added by an earlier call are replaced, foreign handlers are left alone.
    ``level`` defaults to the ``RWD_LOG_LEVEL`` environment variable, else ``INFO``. ``log_file`` is
    appended to and created with mode 0600 (run logs can name hosts, paths and settings).
    """
    level = level if level is not None else os.environ.get("RWD_LOG_LEVEL", "INFO")
    if isinstance(level, str):
        level = level.upper()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    console = logging.StreamHandler()
    console.setFormatter(logging.Formatter(CONSOLE_FORMAT, datefmt="%H:%M:%S"))
    handlers: list[logging.Handler] = [console]
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        file_handler = PrivateFileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    root.setLevel(level)
