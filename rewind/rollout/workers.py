"""Environment workers (``rollout.workers=N``): the envs of a batch live in ``N`` subprocesses, the policy
stays in this process and runs batched.

:class:`EnvWorkers` starts the workers (``forkserver`` or ``spawn``, never ``fork``: torch may hold
threads in the parent) and hands out one :class:`WorkerEnv` proxy per env. Env ``i`` lives in worker
``i % N``. Observations, actions and physics states pass through one shared-memory block
(:mod:`rewind.rollout.slots`); infos, snapshots and everything else through each worker's pipe.

* ``rewind.rollout.pool.step_many(envs, indices, actions)`` steps proxies through
  :meth:`EnvWorkers.step_many`: every worker steps its listed envs while the others do theirs; the
  call returns when all are done, with the same rows as the in-process loop.
* A proxy behaves like the env for what rollouts call: ``reset``, ``step``, ``snapshot``/``restore``
  (of the outermost layer that has them; bit-exact through the boundary), ``render`` and
  ``unwrapped.<anything>`` (``physics_state()`` and ``elapsed_steps`` are served without a round trip).
* A worker that dies, or hangs (no reply within ``step_timeout_s``: it is killed), raises
  :class:`WorkerError` naming the worker and the seeds it was running; the pool is closed then (the
  other workers stop too). A pool is closed by :meth:`EnvWorkers.close`, on
  garbage collection, or at interpreter exit; its workers also exit when this process dies.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym
import numpy as np

from rewind.config import check_choice, check_range, require
from rewind.envs.config import EnvConfig, build_env
from rewind.envs.wrappers import PerturbationConfig, apply_perturbations
from rewind.rollout.config import (
    BACKENDS,
    START_METHODS,
    START_TIMEOUT_S,
    STEP_TIMEOUT_S,
    RolloutConfig,
)
from rewind.rollout.pool import StepOutcome, rejected
from rewind.rollout.proxies import RemoteTask, WorkerEnv
from rewind.rollout.worker_loop import Sync, serve
from rewind.rollout.workers_io import (
    Resources,
    check_factory,
    death_cause,
    main_hidden,
    seeds_text,
    start_context,
)

log = logging.getLogger(__name__)


class WorkerError(ValueError):
    """An environment worker died, hung or could not start. A ``ValueError`` subclass defined in
    rewind, so commands report it as one line (exit status 2), like a store error."""


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for one env, as every worker builds it: the task ``env`` with the
    perturbation wrappers ``perturbation`` enables."""

    env: EnvConfig
    perturbation: PerturbationConfig = field(default_factory=PerturbationConfig)

    def __call__(self) -> gym.Env:
        """Build the env."""
        return apply_perturbations(build_env(self.env), self.perturbation)


class EnvWorkers(Sequence[WorkerEnv]):
    """``num_envs`` envs built by ``factory`` in ``workers`` subprocesses; a sequence of proxies.

    Args:
        factory: picklable zero-argument callable that builds one env (e.g. :class:`EnvFactory`).
        num_envs: envs in the pool; env ``i`` lives in worker ``i % workers``.
        workers: worker processes (capped at ``num_envs``).
        start_method: ``forkserver`` or ``spawn``.
        step_timeout_s: seconds a worker may take to answer one command before it counts as hung
            (``rollout.step_timeout_s``; starting gets at least ``START_TIMEOUT_S``; 0: wait forever).

    Raises:
        WorkerError: a worker died or hung while starting. An exception raised by ``factory`` in a
            worker is raised here as it was.
    """

    def __init__(
        self,
        factory: Callable[[], gym.Env],
        num_envs: int,
        workers: int,
        start_method: str = "forkserver",
        step_timeout_s: float = STEP_TIMEOUT_S,
    ) -> None:
        require(num_envs >= 1, f"num_envs must be >= 1; got {num_envs}")
        check_range("rollout.workers", workers, 1)
        check_choice("rollout.start_method", start_method, START_METHODS)
        check_range("rollout.step_timeout_s", step_timeout_s, 0)
        self.num_workers = min(workers, num_envs)
        self.step_timeout_s = float(step_timeout_s)
        self._owner = [g % self.num_workers for g in range(num_envs)]
        self._seeds: list[int | None] = [None] * num_envs
        self._elapsed: list[int | None] = [None] * num_envs
        self._orders: list[dict[int, tuple[str, ...]]] = [{} for _ in range(self.num_workers)]
        self._methods: set[tuple[str, str]] = set()
        self._res = Resources()
        self._finalizer = weakref.finalize(self, self._res.shutdown)
        try:
            self._start(start_context(start_method), factory, num_envs)
        except BaseException:
            self.close()
            raise
        self._envs = [WorkerEnv(self, g) for g in range(num_envs)]

    # ------------------------------------------------------------------ start, close
    def _start(self, ctx: Any, factory: Callable[[], gym.Env], num_envs: int) -> None:
        res = self._res
        check_factory(factory)
        for w in range(self.num_workers):
            mine = [g for g in range(num_envs) if self._owner[g] == w]
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=serve, args=(child, factory, mine), name=f"rewind-env-worker-{w}")
            proc.daemon = True
            res.procs.append(proc)
            res.conns.append(parent)
            with main_hidden():
                proc.start()
            child.close()
        starting = dict.fromkeys(range(self.num_workers))
        patience = max(self.step_timeout_s, START_TIMEOUT_S) if self.step_timeout_s else 0.0
        first = self._exchange(starting, lambda w: "starting", patience)
        self.layout, self.observation_space, self.action_space, self.metadata, self.render_mode = first[0]
        res.shm = SharedMemory(create=True, size=num_envs * self.layout.size)
        res.views = [self.layout.views(res.shm.buf, g) for g in range(num_envs)]
        self._exchange({w: ("attach", res.shm.name) for w in starting}, lambda w: "starting", patience)
        log.debug("%d env workers started (%d envs)", self.num_workers, num_envs)

    def close(self) -> None:
        """Stop the workers (politely, then by force) and free the shared block; safe to call twice."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """The pool was closed (or a worker died)."""
        return not self._finalizer.alive

    def __enter__(self) -> EnvWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (worker ``w`` first)."""
        return [int(p.pid) for p in self._res.procs]

    # ------------------------------------------------------------------ sequence of proxies
    def __len__(self) -> int:
        return len(self._envs)

    def __getitem__(self, i: Any) -> Any:
        return self._envs[i]

    def __iter__(self) -> Iterator[WorkerEnv]:
        return iter(self._envs)

    # ------------------------------------------------------------------ the calls (``g``: env index)
    def step_many(
        self, envs: Sequence[Any], indices: Sequence[int], actions: Sequence[np.ndarray]
    ) -> list[StepOutcome]:
        """:func:`rewind.rollout.pool.step_many` for proxies of this pool: the workers step their listed
        envs at the same time; one row per index, in order (a rejected action is a row)."""
        if len(indices) != len(actions):
            raise ValueError(f"step_many: {len(indices)} indices but {len(actions)} actions")
        ids = [self._own(envs[i]) for i in indices]
        raw = self.step_envs(ids, actions)
        return [
            rejected(r[1]) if r[0] == "rejected" else self.outcome(g, r)
            for g, r in zip(ids, raw, strict=True)
        ]

    def step_chunks(
        self, envs: Sequence[Any], indices: Sequence[int], action_seqs: Sequence[Sequence[np.ndarray]]
    ) -> list[list[StepOutcome]]:
        """:func:`rewind.rollout.pool.step_chunks` for proxies of this pool: one message per worker
        carries every listed env's actions; the workers step them all at the same time."""
        if len(indices) != len(action_seqs):
            raise ValueError(f"step_chunks: {len(indices)} indices but {len(action_seqs)} action sequences")
        ids = [self._own(envs[i]) for i in indices]
        raw = self._by_worker("chunk", ids, [np.asarray(seq) for seq in action_seqs])
        return [
            [rejected(r[1]) if r[0] == "rejected" else self.outcome(g, r) for r in rows]
            for g, rows in zip(ids, raw, strict=True)
        ]

    def _own(self, env: Any) -> int:
        if not isinstance(env, WorkerEnv) or env.worker_pool is not self:
            raise ValueError(f"step_many: {type(env).__name__} is not an env of this worker pool")
        return env.index

    def step_envs(self, ids: list[int], actions: Sequence[Any]) -> list[tuple]:
        """Raw worker replies for stepping envs ``ids`` (pool indices) with ``actions``, in order."""
        self._check_open()  # before the action slots are written
        slot = self.layout.action
        payload = []
        for g, a in zip(ids, actions, strict=True):
            if slot is not None and slot.fits(a):
                np.copyto(self._res.views[g].action, a)  # type: ignore[arg-type]
                a = None
            payload.append(a)
        return self._by_worker("step", ids, payload)

    def _by_worker(self, command: str, ids: list[int], payload: Sequence[Any]) -> list[Any]:
        """Send ``(command, [(g, item), ...])`` to the workers owning envs ``ids``; replies in order."""
        self._check_open()
        if len(set(ids)) != len(ids):
            raise ValueError(f"{command}: an env is listed twice")
        groups: dict[int, list[tuple[int, Any]]] = {}
        for g, item in zip(ids, payload, strict=True):
            groups.setdefault(self._owner[g], []).append((g, item))
        replies = self._exchange(
            {w: (command, items) for w, items in groups.items()},
            lambda w: "running " + seeds_text([self._seeds[g] for g, _ in groups[w]]),
        )
        cursors = {w: iter(r) for w, r in replies.items()}
        return [next(cursors[self._owner[g]]) for g in ids]

    def outcome(self, g: int, reply: tuple) -> StepOutcome:
        """The ``step_many`` row of env ``g`` from its worker's raw reply (not a rejected one)."""
        reward, terminated, truncated, info, sync = reply
        return self._read(g, sync), float(reward), bool(terminated), bool(truncated), info

    def reset_env(self, g: int, seed: int | None, options: dict | None) -> tuple[dict[str, np.ndarray], dict]:
        """``reset`` env ``g`` (its seed is what a death message names until the next reset)."""
        self._seeds[g] = seed
        w = self._owner[g]
        reply = self._exchange({w: ("reset", [(g, seed, options)])}, lambda w: f"resetting seed {seed}")
        info, sync = reply[w][0]
        return self._read(g, sync), info  # type: ignore[return-value]

    def call(self, g: int, target: str, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call method ``name`` of env ``g``'s ``target`` (``env``, ``unwrapped`` or ``wrapper``)."""
        return self._request(g, target, name, args, kwargs)

    def attr(self, g: int, target: str, name: str) -> Any:
        """Attribute ``name`` of env ``g``'s ``target``: a method comes back as a callable proxy."""
        if (target, name) not in self._methods:
            kind, value = self._request(g, target, name, None, None)
            if kind == "value":
                return value
            self._methods.add((target, name))
        return lambda *args, **kwargs: self._request(g, target, name, args, kwargs)

    def _request(self, g: int, target: str, name: str, args: tuple | None, kwargs: dict | None) -> Any:
        w = self._owner[g]
        message = ("call", (g, target, name, args, kwargs))
        reply = self._exchange({w: message}, lambda w: "running " + seeds_text([self._seeds[g]]))
        value, sync = reply[w]
        self._read(g, sync)
        return value

    def physics_state(self, g: int) -> np.ndarray:
        """Env ``g``'s flat physics state, as its last command left it in shared memory (a copy)."""
        view = self._res.views[g].state if self._res.views else None
        if view is None or self.closed:
            return self.call(g, "unwrapped", "physics_state")
        return view.copy()

    def elapsed_steps(self, g: int) -> int:
        """Env ``g``'s control steps in the episode, as its last reply said."""
        if self._elapsed[g] is None:
            return self.attr(g, "unwrapped", "elapsed_steps")
        return int(self._elapsed[g])  # type: ignore[arg-type]

    def _read(self, g: int, sync: Sync) -> dict[str, np.ndarray] | None:
        """The observation ``sync`` describes (copied out of the shared slot); notes elapsed steps."""
        oid, new_order, fallback, self._elapsed[g] = sync
        if fallback is not None or oid is None:
            return fallback
        orders = self._orders[self._owner[g]]
        if new_order is not None:
            orders[oid] = new_order
        views = self._res.views[g].obs
        return {k: views[k].copy() for k in orders[oid]}

    # ------------------------------------------------------------------ messages
    def _exchange(
        self, messages: dict[int, Any], doing: Callable[[int], str], timeout_s: float | None = None
    ) -> dict[int, Any]:
        """Send each worker its message (``None``: send nothing, only wait), wait for every reply, all
        within ``timeout_s`` (default :attr:`step_timeout_s`; 0: no limit).

        Raises:
            WorkerError: a worker died or hung (the pool is closed).
            Exception: the first error a worker reported, as it raised it (the pool stays usable).
        """
        self._check_open()
        res = self._res
        timeout_s = self.step_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s if timeout_s else None
        for w, message in messages.items():
            if message is not None:
                try:
                    res.conns[w].send(message)
                except OSError:
                    self._died(w, doing(w))
        replies = {}
        try:  # a worker's end of its pipe is open in that worker only: its death is an EOF here
            for w in messages:
                replies[w] = self._receive(w, doing, deadline, timeout_s)
        except BaseException:  # Ctrl-C while waiting: replies would be left in the pipes, so close
            self.close()
            raise
        for w in messages:
            status, value = replies[w]
            if status == "error":
                exc, tb = value
                exc.add_note(f"raised in environment worker {w} (pid {res.procs[w].pid}):\n{tb}")
                raise exc
        return {w: replies[w][1] for w in messages}

    def _check_open(self) -> None:
        if self.closed:
            raise WorkerError(self._res.broken or "the environment workers are closed")

    def _receive(
        self, w: int, doing: Callable[[int], str], deadline: float | None, timeout_s: float
    ) -> tuple[str, Any]:
        conn = self._res.conns[w]
        try:
            if deadline is not None and not conn.poll(max(0.0, deadline - time.monotonic())):
                self._hung(w, doing(w), timeout_s)
            return conn.recv()
        except WorkerError:
            raise
        except Exception:  # noqa: BLE001 - EOF or a torn message: the worker is gone
            self._died(w, doing(w))
            raise AssertionError("unreachable") from None

    def _hung(self, w: int, doing: str, timeout_s: float) -> None:
        """Worker ``w`` did not answer in time: kill it, stop the pool, raise the one-line error."""
        proc = self._res.procs[w]
        proc.kill()
        proc.join()
        message = (
            f"environment worker {w} (pid {proc.pid}) did not answer within {timeout_s:g} s "
            f"(rollout.step_timeout_s={self.step_timeout_s:g}) while {doing}; the worker pool was stopped"
        )
        self._stop(message)

    def _died(self, w: int, doing: str) -> None:
        proc = self._res.procs[w]
        self._stop(f"environment worker {w} (pid {proc.pid}) died ({death_cause(proc)}) while {doing}")

    def _stop(self, message: str) -> None:
        """Close the pool as broken by ``message`` and raise it as a :class:`WorkerError`."""
        self._res.broken = message
        log.error("%s", message)
        self.close()
        raise WorkerError(message)


@contextlib.contextmanager
def open_envs(
    factory: Callable[[], gym.Env], num_envs: int, cfg: RolloutConfig, first: gym.Env | None = None
) -> Iterator[Sequence[Any]]:
    """``num_envs`` envs: in this process (``cfg.workers == 0``; ``first``, when given, is env 0 and
    stays open) or an :class:`EnvWorkers` pool; closed at the end of the block."""
    if cfg.workers:
        with EnvWorkers(factory, num_envs, cfg.workers, cfg.start_method, cfg.step_timeout_s) as pool:
            yield pool
        return
    envs = [first] if first is not None else []
    envs += [factory() for _ in range(num_envs - len(envs))]
    try:
        yield envs
    finally:
        for env in envs[1 if first is not None else 0 :]:
            env.close()


__all__ = [
    "BACKENDS",
    "START_METHODS",
    "EnvFactory",
    "EnvWorkers",
    "RemoteTask",
    "RolloutConfig",
    "WorkerEnv",
    "WorkerError",
    "open_envs",
]
