"""The ``rollout`` node: how a command (``rewind-eval``, ``rewind-calibrate``, ``rewind-monitor-eval``,
``rewind-loop``'s calibration and evaluation) steps its envs. One schema, one set of defaults, for
every command that has the node (``docs/rollouts.md``)."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import check_choice, check_range, require
from rewind.rollout.ray_backend import RayOptions

#: how env workers start (never ``fork``: torch threads in the parent do not survive one)
START_METHODS = ("forkserver", "spawn")
#: where rollouts run: ``local`` (this process, its workers) or ``ray`` (Ray actors, rewind.rollout.ray_backend)
BACKENDS = ("local", "ray")
#: seconds an env worker may take to answer one command before it counts as hung (``0``: wait forever)
STEP_TIMEOUT_S = 60.0
#: seconds an env worker gets, at least, to start (import its simulator, build its envs)
START_TIMEOUT_S = 300.0


@dataclass
class RolloutConfig:
    """How a command steps its envs (the ``rollout`` node).

    Attributes:
        workers: 0 steps the envs in this process; ``N >= 1`` steps them in ``N`` worker processes
            (never more than there are envs), the policy batched in this process. Results are
            identical either way.
        start_method: how workers start: ``forkserver`` (one clean server process forks them) or
            ``spawn``. Never ``fork``: torch threads in the parent do not survive a fork.
        step_timeout_s: seconds a worker may take to answer one command (a step of its envs, a reset,
            a snapshot); a worker that takes longer is hung: the pool is stopped and a one-line
            :class:`~rewind.rollout.workers.WorkerError` names the worker, its seeds and the timeout.
            Starting (building the envs) gets at least ``START_TIMEOUT_S``. ``0``: wait forever.
        batch_size: monitored episodes stepped in lockstep (``rewind.monitor.batched``; 1: one at a
            time). Results do not depend on it.
        inference_rows: rows of every batched policy inference of monitored episodes (padded), so
            that an episode's result does not depend on the batch; part of the result (0: unpadded,
            fastest at ``batch_size=1``, equal across batch sizes only to float precision).
        backend: ``local`` runs the episodes in this process; ``ray`` shards the seeds over Ray actors
            (each with its own policy copy; the same records; ``docs/rollouts.md`` "Ray"). Only
            ``rewind-eval`` (and the loop's evaluations) run on Ray; ``workers`` needs ``local``.
        address, actors, actor_cpus, actor_gpus, max_retries, unit_timeout_s: the Ray run
            (:class:`~rewind.rollout.ray_backend.RayOptions`; ``address`` null: a local Ray instance;
            ``unit_timeout_s``: seconds an actor may take for one unit of seeds before it counts as
            hung, is killed and the unit runs again, within ``max_retries``; ``0``: wait forever).
    """

    workers: int = 0
    start_method: str = "forkserver"
    step_timeout_s: float = STEP_TIMEOUT_S
    batch_size: int = 10
    inference_rows: int = 10
    backend: str = "local"
    # the Ray fields, flat on the command line; their defaults are RayOptions' (one source of truth)
    address: str | None = RayOptions.address
    actors: int = RayOptions.actors
    actor_cpus: float = RayOptions.actor_cpus
    actor_gpus: float = RayOptions.actor_gpus
    max_retries: int = RayOptions.max_retries
    unit_timeout_s: float = RayOptions.unit_timeout_s

    def __post_init__(self) -> None:
        check_choice("rollout.backend", self.backend, BACKENDS)
        self.ray_options()  # checks the Ray fields
        check_range("rollout.batch_size", self.batch_size, 1)
        check_range("rollout.inference_rows", self.inference_rows, 0)
        check_range("rollout.workers", self.workers, 0, 256)
        check_choice("rollout.start_method", self.start_method, START_METHODS)
        check_range("rollout.step_timeout_s", self.step_timeout_s, 0)
        if self.backend == "ray":
            require(not self.workers, "rollout.workers needs rollout.backend=local; use rollout.actors")

    def ray_options(self) -> RayOptions:
        """The Ray fields as :class:`~rewind.rollout.ray_backend.RayOptions`."""
        return RayOptions(
            self.address, self.actors, self.actor_cpus, self.actor_gpus, self.max_retries, self.unit_timeout_s
        )


def require_local(cfg: RolloutConfig, command: str) -> None:
    """A one-line error when ``command`` (which runs its rollouts here) is asked for ``rollout.backend=ray``."""
    require(
        cfg.backend == "local",
        f"rollout.backend={cfg.backend}: {command} runs its rollouts in this process "
        "(rollout.workers=N steps them in worker processes); only rewind-eval runs on Ray",
    )
