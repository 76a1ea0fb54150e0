"""Ray backend of the rollout engine (``rollout.backend=ray``): episode seeds sharded over Ray actors.

Contract:

* A **job** is a small picklable object that says what to run: run-folder paths and settings, never
  tensors. Each actor calls ``job.build()`` once, in its own process on its own device (the job loads
  the policy weights there with :func:`rewind.train.policy_api.load_policy`), and then
  ``runner.run(seeds)`` for every **unit** of seeds it is handed (one episode, or one lockstep batch).
* A unit's result must be a function of the unit alone (per-episode noise streams), so it does not
  matter which actor ran it, nor how often: results equal the local backend's.
* Results come back to the driver, which receives them **in unit order** (``on_result``) and is the
  only writer to the store: an actor that dies loses nothing committed. Its unit runs again on a fresh
  actor, at most ``max_retries`` times; then a one-line :class:`RayRolloutError` names the seeds.
* An actor that hangs is treated as one that died: a unit gets ``unit_timeout_s`` from the moment its
  actor is ready for it (a new actor first gets ``max(ACTOR_START_S, unit_timeout_s)`` to start); an
  actor past its deadline is killed and its unit runs again, within the same ``max_retries``.
* Ray is an optional extra (``pip install 'rewind[ray]'``); without it, or with an address nobody
  answers at, the error is one line that says so.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from rewind.config import ConfigError, check_range

log = logging.getLogger(__name__)

#: the env variables a local Ray instance passes on to its workers (headless MuJoCo rendering)
FORWARDED_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "RWD_LOG_LEVEL")
INSTALL_HINT = "pip install 'rewind[ray]' (or: pip install ray)"
#: seconds an actor may take for one unit of seeds before it counts as hung (``rollout.unit_timeout_s``)
UNIT_TIMEOUT_S = 1800.0
#: seconds a new actor gets, at least, to start: be placed, import, load the policy weights, build its envs
ACTOR_START_S = 300.0


class RayRolloutError(ConfigError):
    """Ray missing or unreachable, or a unit of seeds whose actors kept dying: one line, exit status 2."""


class ShardRunner(Protocol):
    """Built inside an actor by :meth:`ShardJob.build`; runs one unit of seeds at a time."""

    def run(self, seeds: list[int]) -> Any:
        """The unit's result (picklable; episodes for the store travel inside it)."""


class ShardJob(Protocol):
    """What every actor runs (picklable, small: paths and settings)."""

    def build(self) -> ShardRunner:
        """Load everything the unit runs need (policy weights, envs) in the actor's process."""


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a Ray run goes (the ``rollout.address``, ``rollout.actors``, ... options).

    Attributes:
        address: ``None`` starts a local Ray instance for the run; ``auto`` joins the cluster this
            machine belongs to (``ray start``); ``HOST:PORT`` a head node's address; ``ray://HOST:10001``
            through Ray Client.
        actors: actors started, each with its own policy copy (capped by the cluster's CPUs / GPUs).
        actor_cpus: CPUs each actor reserves (its torch threads follow the job's setting).
        actor_gpus: GPUs each actor reserves; with ``> 0`` its policy runs on its own GPU.
        max_retries: times a unit runs again after its actor died or hung.
        unit_timeout_s: seconds an actor may take for one unit of seeds (counted from when the actor is
            ready for it; a new actor gets ``max(ACTOR_START_S, unit_timeout_s)`` to start); an actor
            past it is killed and the unit runs again, as after a death. ``0``: wait forever.
    """

    address: str | None = None
    actors: int = 2
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    max_retries: int = 2
    unit_timeout_s: float = UNIT_TIMEOUT_S

    def __post_init__(self) -> None:
        check_range("rollout.actors", self.actors, 1, 1024)
        check_range("rollout.actor_cpus", self.actor_cpus, 0.01)
        check_range("rollout.actor_gpus", self.actor_gpus, 0)
        check_range("rollout.max_retries", self.max_retries, 0, 100)
        check_range("rollout.unit_timeout_s", self.unit_timeout_s, 0)


def require_ray() -> ModuleType:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise
        raise RayRolloutError(
            f"rollout.backend=ray needs Ray, which is not installed: {INSTALL_HINT}"
        ) from None
    return ray


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (one line) when nothing listens at ``HOST:PORT`` / ``ray://HOST:PORT`` (``ray.init``
    itself retries an unreachable address for minutes)."""
    host_port = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = host_port.rpartition(":")
    if not sep or not port.isdigit():
        raise RayRolloutError(f"rollout.address={address}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayRolloutError(f"rollout.address={address}: no Ray cluster reachable there ({exc})") from None


def _init_kwargs(options: RayOptions) -> dict[str, Any]:
    env_vars = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "runtime_env": {"env_vars": env_vars}}
    if options.address is None:  # a local instance sized so that every actor asked for fits
        need = math.ceil(options.actors * options.actor_cpus)
        kwargs.update(num_cpus=max(os.cpu_count() or 1, need), include_dashboard=False)
    else:
        kwargs["address"] = options.address
    return kwargs


@contextmanager
def ray_session(options: RayOptions) -> Iterator[ModuleType]:
    """``ray`` connected as ``options.address`` says; a session already started (a test, a notebook)
    is used as it is and left running, one started here is shut down at the end."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    if options.address not in (None, "auto"):
        check_reachable(options.address)
    try:
        ray.init(**_init_kwargs(options))
    except ConnectionError as exc:
        where = options.address or "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayRolloutError(f"rollout.address={where}: no Ray cluster reachable there ({first})") from None
    try:
        yield ray
    finally:
        ray.shutdown()


class _RolloutActor:
    """The actor: builds the job once; a build error is raised by every :meth:`run` (a task error the
    driver reports as it is, instead of an actor death it would retry)."""

    def __init__(self, job: ShardJob) -> None:
        self._runner: ShardRunner | None = None
        self._error: BaseException | None = None
        try:
            self._runner = job.build()
        except Exception as exc:  # reported by run(), see the class docstring
            self._error = exc

    def ready(self) -> bool:
        """``True`` once the job is built (its build error otherwise)."""
        if self._error is not None:
            raise self._error
        return True

    def run(self, seeds: list[int]) -> Any:
        self.ready()
        assert self._runner is not None
        return self._runner.run(seeds)


def actor_slots(ray: ModuleType, options: RayOptions) -> int:
    """Actors to start: ``options.actors``, capped by what the cluster can place at once."""
    res = ray.cluster_resources()
    fit = int(res.get("CPU", 0) // options.actor_cpus)
    if options.actor_gpus:
        fit = min(fit, int(res.get("GPU", 0) // options.actor_gpus))
    if fit < 1:
        gpus = f" and {options.actor_gpus} GPU(s)" if options.actor_gpus else ""
        raise RayRolloutError(
            f"rollout.actor_cpus={options.actor_cpus}{gpus} per actor: the Ray cluster has only "
            f"{res.get('CPU', 0)} CPU(s) and {res.get('GPU', 0)} GPU(s)"
        )
    if fit < options.actors:
        log.warning("rollout.actors=%d: the Ray cluster fits %d; starting %d", options.actors, fit, fit)
    return min(options.actors, fit)


def _cause(exc: BaseException) -> BaseException:
    """The exception a task raised in the actor (``RayTaskError.cause``), else ``exc``."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


@dataclass
class _Attempt:
    """A unit handed to the actor in ``slot`` at ``since`` (``time.monotonic``)."""

    slot: int
    unit: int
    since: float


class RayShards:
    """Ray actors running the units of one job; a context manager (actors and a Ray instance started
    here end with it).

    Attributes:
        actors: the actor handles, one per slot (a dead or hung actor is replaced in its slot).
        running: slot -> the seeds its actor is running now (during :meth:`run`).
        restarts: actors started in place of dead or hung ones.
    """

    def __init__(self, job: ShardJob, options: RayOptions) -> None:
        self.job, self.options = job, options
        self.actors: list[Any] = []
        self.running: dict[int, list[int]] = {}
        self.restarts = 0
        self._stack = ExitStack()
        self.ray: ModuleType | None = None
        self._created: list[float] = []  # slot -> when its actor was started
        self._ready_at: list[float | None] = []  # slot -> when its actor was seen ready
        self._starting: dict[Any, int] = {}  # an unstarted actor's ready() ref -> its slot

    def __enter__(self) -> RayShards:
        with ExitStack() as stack:
            self.ray = stack.enter_context(ray_session(self.options))
            resources = {"num_cpus": self.options.actor_cpus, "num_gpus": self.options.actor_gpus}
            self._actor_class = self.ray.remote(**resources)(_RolloutActor)
            slots = actor_slots(self.ray, self.options)
            self.actors, self._created, self._ready_at = [None] * slots, [0.0] * slots, [None] * slots
            for slot in range(slots):
                self._start_actor(slot)
            log.info("ray: %d actor(s) on %s", slots, self.options.address or "a local instance")
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for actor in self.actors:
                self.ray.kill(actor)
        finally:
            self.actors = []
            self._stack.close()

    def _start_actor(self, slot: int) -> None:
        """A new actor in ``slot`` (watched until it is ready when units have a timeout)."""
        self._starting = {ref: s for ref, s in self._starting.items() if s != slot}
        self.actors[slot] = self._actor_class.remote(self.job)
        self._created[slot], self._ready_at[slot] = time.monotonic(), None
        if self.options.unit_timeout_s:
            self._starting[self.actors[slot].ready.remote()] = slot

    def _mark_ready(self, slot: int) -> None:
        """Note that the actor in ``slot`` has built its job (its unit's clock starts)."""
        if self._ready_at[slot] is None:
            self._ready_at[slot] = time.monotonic()
        self._starting = {ref: s for ref, s in self._starting.items() if s != slot}

    def wait_ready(self) -> None:
        """Block until every actor has built its job (raises a build error as it was)."""
        try:
            self.ray.get([actor.ready.remote() for actor in self.actors])
        except self.ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None

    def run(self, units: Sequence[Sequence[int]], on_result: Callable[[int, Any], None]) -> None:
        """Run every unit; ``on_result(i, result)`` is called on the driver for unit ``i``, in order.

        Raises:
            RayRolloutError: a unit's actor died or hung more than ``max_retries`` times.
            Exception: what a unit raised in its actor (the original exception, e.g. a ConfigError).
        """
        ray = self.ray
        assert ray is not None, "use RayShards as a context manager"
        queue, idle = deque(range(len(units))), deque(range(len(self.actors)))
        inflight: dict[Any, _Attempt] = {}  # result ref -> its attempt
        done: dict[int, Any] = {}
        failures = [Counter[str]() for _ in units]
        emitted = 0
        while emitted < len(units):
            while idle and queue:
                slot, unit = idle.popleft(), queue.popleft()
                ref = self.actors[slot].run.remote(list(units[unit]))
                inflight[ref] = _Attempt(slot, unit, time.monotonic())
                self.running[slot] = list(units[unit])
            ready, _ = ray.wait([*inflight, *self._starting], num_returns=1, timeout=self._wait_s(inflight))
            if ready and ready[0] in self._starting:
                self._mark_ready(self._starting[ready[0]])
                continue
            for ref, overdue in [(ready[0], None)] if ready else self._overdue(inflight):
                attempt = inflight.pop(ref)
                del self.running[attempt.slot]
                ok, result = self._collect(ref, attempt, overdue, list(units[attempt.unit]), failures)
                if ok:
                    done[attempt.unit] = result
                else:
                    queue.appendleft(attempt.unit)
                idle.append(attempt.slot)
            while emitted in done:
                on_result(emitted, done.pop(emitted))
                emitted += 1

    def _collect(
        self, ref: Any, attempt: _Attempt, overdue: str | None, seeds: list[int], failures: list[Counter[str]]
    ) -> tuple[bool, Any]:
        """``(True, result)`` of a finished unit; ``(False, None)`` when its actor died or is ``overdue``
        (``hung`` or ``unstarted``): the actor is replaced and the unit is to run again."""
        kind, detail = overdue, ""
        if kind is None:
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as exc:
                kind, detail = "died", (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            except self.ray.exceptions.RayTaskError as exc:
                log.debug("unit %s failed in its actor:\n%s", seeds, exc)
                raise _cause(exc) from None
            else:
                self._mark_ready(attempt.slot)
                return True, result
        failures[attempt.unit][kind] += 1
        self._replace(attempt.slot, seeds, failures[attempt.unit], detail)
        return False, None

    def _deadline(self, attempt: _Attempt) -> tuple[float, str]:
        """When ``attempt`` is overdue, and what its actor then is: ``unstarted`` or ``hung``."""
        ready_at, timeout = self._ready_at[attempt.slot], self.options.unit_timeout_s
        if ready_at is None:
            return self._created[attempt.slot] + max(ACTOR_START_S, timeout), "unstarted"
        return max(attempt.since, ready_at) + timeout, "hung"

    def _wait_s(self, inflight: dict[Any, _Attempt]) -> float | None:
        """Seconds until the first deadline of the units in flight (``None``: no timeout)."""
        if not self.options.unit_timeout_s or not inflight:
            return None
        return max(0.0, min(self._deadline(a)[0] for a in inflight.values()) - time.monotonic())

    def _overdue(self, inflight: dict[Any, _Attempt]) -> list[tuple[Any, str]]:
        """The result refs of the units past their deadline, with what their actor is."""
        now = time.monotonic()
        deadlines = {ref: self._deadline(a) for ref, a in inflight.items()}
        return [(ref, kind) for ref, (deadline, kind) in deadlines.items() if deadline <= now]

    def _replace(self, slot: int, seeds: list[int], failures: Counter[str], detail: str) -> None:
        """A fresh actor in ``slot`` after its actor died or hung running ``seeds`` (killed first), or
        the one-line error once they failed more than ``max_retries`` times."""
        self.ray.kill(self.actors[slot])
        why = " and ".join(self._failure_text(kind, n) for kind, n in failures.items())
        if sum(failures.values()) > self.options.max_retries:
            raise RayRolloutError(
                f"seeds {seeds}: their Ray actor {why}, more than "
                f"rollout.max_retries={self.options.max_retries}" + (f" ({detail})" if detail else "")
            )
        log.warning("ray: the actor running seeds %s %s; running them again on a new actor", seeds, why)
        self._start_actor(slot)
        self.restarts += 1

    def _failure_text(self, kind: str, n: int) -> str:
        """``died 2 time(s)``, ``hung 1 time(s) (no result within rollout.unit_timeout_s=60 s; killed)``."""
        timeout = self.options.unit_timeout_s
        if kind == "hung":
            return f"hung {n} time(s) (no result within rollout.unit_timeout_s={timeout:g} s; killed)"
        if kind == "unstarted":
            return f"did not start {n} time(s) (not ready within {max(ACTOR_START_S, timeout):g} s; killed)"
        return f"died {n} time(s)"


def run_sharded(
    job: ShardJob, units: Sequence[Sequence[int]], options: RayOptions, on_result: Callable[[int, Any], None]
) -> dict[str, int]:
    """:meth:`RayShards.run` in a session of its own; returns the actors started and restarted."""
    with RayShards(job, options) as shards:
        shards.run(units, on_result)
        return {"actors": len(shards.actors), "restarts": shards.restarts}
