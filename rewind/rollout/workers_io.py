"""Small parts of :mod:`rewind.rollout.workers`: how workers are started (the multiprocessing context,
without the caller's ``__main__``), the resources a pool holds and how they are freed, how a worker's
death is described, and read-only snapshots on this side of the boundary."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import pickle
import signal
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.rollout.slots import SlotViews


def start_context(start_method: str) -> Any:
    """The multiprocessing context; a forkserver preloads the worker side once for all its workers."""
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["rewind.rollout.worker_loop"])
    return ctx


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """Start processes without running the caller's ``__main__`` again in them.

    ``spawn`` and ``forkserver`` re-import the parent's main script (or ``-m`` module) in every child
    so that objects pickled by reference to ``__main__`` resolve there. For ``rewind-eval`` that is
    torch, Hydra and the whole CLI: 7 s of CPU, 20 s on the loaded 2-core machine, per start. A worker
    needs only its factory, which :func:`check_factory` requires to live in an importable module.
    """
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = saved


def check_factory(factory: Callable[[], gym.Env]) -> None:
    """The factory must pickle, by reference to an importable module (workers never import ``__main__``)."""
    try:
        blob = pickle.dumps(factory)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing here
        raise TypeError(f"env workers need a picklable env factory; {factory!r} is not: {exc}") from exc
    if b"__main__" in blob:
        raise TypeError(f"env workers cannot import {factory!r}: define it in a module, not in __main__")


#: Seconds a worker gets to exit after ``close`` before it is terminated, then killed.
CLOSE_TIMEOUT_S = 5.0


@dataclass
class Resources:
    """What an env-worker pool holds: processes, pipes, the shared block and views into it, and the
    message of the death that broke the pool (if one did)."""

    procs: list[Any] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    shm: SharedMemory | None = None
    views: list[SlotViews] = field(default_factory=list)
    broken: str | None = None

    def shutdown(self) -> None:
        """Ask every worker to exit, terminate (then kill) the ones that do not, free the shared block."""
        started = [(c, p) for c, p in zip(self.conns, self.procs, strict=False) if p.pid is not None]
        for conn, proc in started:
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    conn.send(("close", None))
        for _, proc in started:
            proc.join(CLOSE_TIMEOUT_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()
        self.views.clear()
        if self.shm is not None:
            with contextlib.suppress(BufferError):  # a view still held elsewhere: the mapping stays
                self.shm.close()
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
            self.shm = None


def death_cause(proc: Any) -> str:
    """How a worker process ended: ``killed by SIGKILL``, ``exit status 1``, or that it stopped answering."""
    proc.join(1.0)
    code = proc.exitcode
    if code is None:
        return "its pipe closed while it still ran"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def seeds_text(seeds: list[int | None]) -> str:
    """``seed 3`` / ``seeds 3, 5`` / ``an env before its first reset``."""
    known = sorted({s for s in seeds if s is not None})
    if not known:
        return "an env before its first reset"
    return ("seed " if len(known) == 1 else "seeds ") + ", ".join(map(str, known))


def freeze(obj: Any) -> Any:
    """Make every array inside ``obj`` (dataclass fields, tuples, lists, dict values) read-only, as the
    env made them: unpickling gives writeable copies. Returns ``obj``."""
    if isinstance(obj, np.ndarray):
        obj.flags.writeable = False
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            freeze(getattr(obj, f.name))
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            freeze(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            freeze(item)
    return obj
