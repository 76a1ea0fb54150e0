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
* Ray is an optional extra (``pip install 'rewind[ray]'``); without it, or with an address nobody
  answers at, the error is one line that says so.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections import deque
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
        max_retries: times a unit runs again after its actor died.
    """

    address: str | None = None
    actors: int = 2
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        check_range("rollout.actors", self.actors, 1, 1024)
        check_range("rollout.actor_cpus", self.actor_cpus, 0.01)
        check_range("rollout.actor_gpus", self.actor_gpus, 0)
        check_range("rollout.max_retries", self.max_retries, 0, 100)


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


class RayShards:
    """Ray actors running the units of one job; a context manager (actors and a Ray instance started
    here end with it).

    Attributes:
        actors: the actor handles, one per slot (a dead actor is replaced in its slot).
        running: slot -> the seeds its actor is running now (during :meth:`run`).
        restarts: actors started in place of dead ones.
    """

    def __init__(self, job: ShardJob, options: RayOptions) -> None:
        self.job, self.options = job, options
        self.actors: list[Any] = []
        self.running: dict[int, list[int]] = {}
        self.restarts = 0
        self._stack = ExitStack()
        self.ray: ModuleType | None = None

    def __enter__(self) -> RayShards:
        with ExitStack() as stack:
            self.ray = stack.enter_context(ray_session(self.options))
            resources = {"num_cpus": self.options.actor_cpus, "num_gpus": self.options.actor_gpus}
            self._actor_class = self.ray.remote(**resources)(_RolloutActor)
            self.actors = [
                self._actor_class.remote(self.job) for _ in range(actor_slots(self.ray, self.options))
            ]
            log.info("ray: %d actor(s) on %s", len(self.actors), self.options.address or "a local instance")
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for actor in self.actors:
                self.ray.kill(actor)
        finally:
            self.actors = []
            self._stack.close()

    def wait_ready(self) -> None:
        """Block until every actor has built its job (raises a build error as it was)."""
        try:
            self.ray.get([actor.ready.remote() for actor in self.actors])
        except self.ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None

    def run(self, units: Sequence[Sequence[int]], on_result: Callable[[int, Any], None]) -> None:
        """Run every unit; ``on_result(i, result)`` is called on the driver for unit ``i``, in order.

        Raises:
            RayRolloutError: a unit's actor died more than ``max_retries`` times.
            Exception: what a unit raised in its actor (the original exception, e.g. a ConfigError).
        """
        ray = self.ray
        assert ray is not None, "use RayShards as a context manager"
        queue, idle = deque(range(len(units))), deque(range(len(self.actors)))
        inflight: dict[Any, tuple[int, int]] = {}  # result ref -> (slot, unit)
        done: dict[int, Any] = {}
        deaths = [0] * len(units)
        emitted = 0
        while emitted < len(units):
            while idle and queue:
                slot, unit = idle.popleft(), queue.popleft()
                inflight[self.actors[slot].run.remote(list(units[unit]))] = (slot, unit)
                self.running[slot] = list(units[unit])
            ready, _ = ray.wait(list(inflight), num_returns=1)
            slot, unit = inflight.pop(ready[0])
            del self.running[slot]
            try:
                done[unit] = ray.get(ready[0])
            except ray.exceptions.RayActorError as exc:
                deaths[unit] += 1
                self._replace(slot, list(units[unit]), deaths[unit], exc)
                queue.appendleft(unit)
            except ray.exceptions.RayTaskError as exc:
                log.debug("unit %s failed in its actor:\n%s", list(units[unit]), exc)
                raise _cause(exc) from None
            idle.append(slot)
            while emitted in done:
                on_result(emitted, done.pop(emitted))
                emitted += 1

    def _replace(self, slot: int, seeds: list[int], deaths: int, exc: BaseException) -> None:
        """A fresh actor in ``slot`` after its actor died running ``seeds`` (or the one-line error)."""
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if deaths > self.options.max_retries:
            raise RayRolloutError(
                f"seeds {seeds}: their Ray actor died {deaths} time(s), more than "
                f"rollout.max_retries={self.options.max_retries} ({first})"
            )
        log.warning(
            "ray: the actor running seeds %s died (%s); running them again on a new actor", seeds, first
        )
        self.ray.kill(self.actors[slot])
        self.actors[slot] = self._actor_class.remote(self.job)
        self.restarts += 1


def run_sharded(
    job: ShardJob, units: Sequence[Sequence[int]], options: RayOptions, on_result: Callable[[int, Any], None]
) -> dict[str, int]:
    """:meth:`RayShards.run` in a session of its own; returns the actors started and restarted."""
    with RayShards(job, options) as shards:
        shards.run(units, on_result)
        return {"actors": len(shards.actors), "restarts": shards.restarts}
