"""``rewind-eval`` on Ray (``rollout.backend=ray``): the episodes sharded over Ray actors.

Each actor builds :class:`EvalJob` once: its own envs and its own copy of the policy, loaded from
``policy_path`` with :func:`rewind.train.policy_api.load_policy` on the actor's device (the run folder
travels as a path; a remote node needs the same path, e.g. a shared filesystem), and the monitor from
``monitor.calibration``. A unit of seeds is what the local backend runs with the same noise:

* without a monitor, one lockstep batch of ``num_envs`` seeds, its noise seeded by ``(seed, first
  episode index)`` as in :mod:`rewind.eval.runner` (``noise_streams=episode``: each episode's own
  stream, seeded by ``(seed, episode seed)``);
* with a monitor, a few episodes (at most ``rollout.batch_size``) stepped by the batched monitored
  runner with ``rollout.inference_rows`` (per-episode noise streams seeded by ``(seed, episode
  seed)``: :func:`rewind.monitor.rollouts.run_monitored` gives the same records for any batch).

So the records equal the local backend's for the same seeds, whichever actor ran a unit. Episodes for
``store_out`` are recorded into a :class:`~rewind.rollout.deferred.DeferredStore` in the actor and
committed here, by the driver alone, in the local backend's order.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rewind.envs.config import build_env
from rewind.envs.wrappers import apply_perturbations
from rewind.eval.config import EvalConfig
from rewind.eval.monitored import monitor_summary, rewind_plots
from rewind.eval.observers import StoreRecorder
from rewind.lockstep import EpisodeRecord, run_batch
from rewind.monitor.factory import load_monitor
from rewind.monitor.rollouts import run_monitored
from rewind.policies.noise import NoiseStream, RowGenerators
from rewind.rollout.deferred import DeferredStore, PendingEpisode
from rewind.rollout.ray_backend import RayOptions, run_sharded
from rewind.store import ReplayStore, StoreSpec, store_spec_for
from rewind.train.policy_api import LoadedPolicy, load_policy
from rewind.utils.device import resolve_device
from rewind.utils.seeding import episode_noise_seed, torch_generator

log = logging.getLogger(__name__)


@dataclass
class UnitResult:
    """What one unit of seeds sends back to the driver.

    Attributes:
        records: one record per seed, in seed order; traces: monitored runs' per-step score traces.
        episodes: the unit's episodes for ``store_out``, in the order the local backend commits them.
    """

    records: list[EpisodeRecord]
    traces: list[list[float | None]] = field(default_factory=list)
    episodes: list[PendingEpisode] = field(default_factory=list)


@dataclass
class EvalJob:
    """rewind-eval's episodes for one Ray actor: the command's config (paths and settings only)."""

    cfg: EvalConfig

    def build(self) -> EvalUnitRunner:
        """Envs, policy weights and monitor, loaded in the actor's process."""
        return EvalUnitRunner(self.cfg)


class EvalUnitRunner:
    """Runs units of seeds of one ``rewind-eval`` config (see the module docstring)."""

    def __init__(self, cfg: EvalConfig) -> None:
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.envs: list[Any] = []
        self._grow(1 if cfg.monitor.enabled else min(cfg.num_envs, cfg.episodes))
        self.spec = store_spec_for(self.envs[0])
        self.loaded = load_policy(
            cfg.policy_path,
            self.envs[0],
            cfg.env.name,
            self.device,
            cfg.n_action_steps,
            sampler=cfg.sampler,
            inference_steps=cfg.inference_steps,
            ddim_eta=cfg.ddim_eta,
        )
        w = self.loaded
        self.monitor, self.tracker, _ = load_monitor(cfg.monitor, w.policy, w.weights_hash, cfg.seed)

    def _grow(self, n: int) -> None:
        """At least ``n`` envs (a unit of monitored episodes gets one each)."""
        while len(self.envs) < n:
            self.envs.append(apply_perturbations(build_env(self.cfg.env), self.cfg.perturbation))

    def run(self, seeds: list[int]) -> UnitResult:
        """The unit's records (and its episodes for the store, when ``store_out`` is set)."""
        cfg = self.cfg
        store = DeferredStore(self.spec) if cfg.store_out else None
        with torch.no_grad():
            if cfg.monitor.enabled:
                self._grow(len(seeds))
                records, traces = run_monitored(
                    self.envs[: len(seeds)],
                    self.loaded,
                    self.monitor,
                    self.tracker,
                    cfg.rewind,
                    seeds,
                    cfg.seed,
                    store,  # type: ignore[arg-type]  # a DeferredStore writes like a ReplayStore
                    cfg.round,
                    progress=False,
                    inference_rows=cfg.rollout.inference_rows,
                )
            else:
                observers = [StoreRecorder(store, self.loaded.version, cfg.round)] if store else []  # type: ignore[arg-type]
                gen = batch_noise(cfg, seeds, self.device)
                records, traces = (
                    run_batch(self.envs, self.loaded.policy, seeds, gen, self.device, observers),
                    [],
                )
        return UnitResult(list(records), traces, store.take() if store else [])


def batch_noise(cfg: EvalConfig, seeds: list[int], device: torch.device) -> torch.Generator | RowGenerators:
    """The sampling noise of the lockstep batch of episodes ``seeds`` (as ``rewind.eval.runner``).

    ``noise_streams=batch``: one generator, seeded by ``(seed, index of the batch's first episode)``,
    so an episode's noise depends on ``num_envs``; ``episode``: one stream per episode, seeded by
    ``(seed, episode seed)`` as the monitored runner seeds it, so it does not.
    """
    if cfg.noise_streams == "episode":
        return RowGenerators(
            [NoiseStream(torch_generator(episode_noise_seed(cfg.seed, s), device)) for s in seeds]
        )
    return torch_generator(episode_noise_seed(cfg.seed, seeds[0] - cfg.seed), device)


def units_of(cfg: EvalConfig, actors: int = 1) -> list[list[int]]:
    """The units of seeds: the lockstep batches of ``num_envs``; with a monitor, runs of at most
    ``rollout.batch_size`` episodes, small enough for two units per actor (any split gives the same
    records, so it is chosen for balance)."""
    seeds = list(range(cfg.seed, cfg.seed + cfg.episodes))
    size = min(cfg.num_envs, cfg.episodes)
    if cfg.monitor.enabled:
        size = max(1, min(cfg.rollout.batch_size, math.ceil(cfg.episodes / (2 * actors))))
    return [seeds[i : i + size] for i in range(0, len(seeds), size)]


def sharded_rollouts(
    cfg: EvalConfig, spec: StoreSpec, options: RayOptions
) -> tuple[list[EpisodeRecord], list[list[float | None]], dict[str, Any]]:
    """All ``cfg.episodes`` episodes on Ray actors; returns the records and traces in seed order and
    a summary of the backend (actors, restarts). ``store_out`` is written here, in the local order."""
    records: list[EpisodeRecord] = []
    traces: list[list[float | None]] = []
    units = units_of(cfg, options.actors)
    opened = ReplayStore.open_or_create(cfg.store_out, spec) if cfg.store_out else contextlib.nullcontext()
    bar = tqdm(total=cfg.episodes, desc=f"eval {cfg.env.name} (ray)", disable=not cfg.progress)
    with opened as store, bar:

        def on_result(_: int, res: UnitResult) -> None:
            for episode in res.episodes:
                episode.commit_into(store)
            records.extend(res.records)
            traces.extend(res.traces)
            bar.update(len(res.records))

        counts = run_sharded(EvalJob(cfg), units, options, on_result)
    return records, traces, {"backend": "ray", "address": options.address, "units": len(units), **counts}


def ray_rollouts(
    cfg: EvalConfig, loaded: LoadedPolicy, spec: StoreSpec
) -> tuple[list[EpisodeRecord], dict[str, Any], dict[str, Any]]:
    """``rewind-eval`` with ``rollout.backend=ray``: the records, the monitor summary (with a monitor:
    its calibration checked here first, so a bad one fails once, on the driver) and the backend's."""
    monitor, info = None, {}
    if cfg.monitor.enabled:
        monitor, _, info = load_monitor(cfg.monitor, loaded.policy, loaded.weights_hash, cfg.seed)
    records, traces, backend = sharded_rollouts(cfg, spec, cfg.rollout.ray_options())
    if cfg.monitor.enabled:
        info.update(monitor_summary(records))  # type: ignore[arg-type]  # monitored records
        info["plots"] = rewind_plots(Path(cfg.out_dir), records, traces, monitor, limit=3)  # type: ignore[arg-type]
        info["rewind"] = {"mode": cfg.rewind.mode, "max_rewinds": cfg.rewind.max_rewinds}
    return records, info, backend
