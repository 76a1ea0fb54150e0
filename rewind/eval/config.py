"""Schema of ``rewind-eval`` (``configs/eval.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rewind.config import CommandConfig, check_choice, require
from rewind.envs.config import EnvConfig, perturbation_config
from rewind.envs.wrappers import PerturbationConfig
from rewind.metrics import WandbConfig
from rewind.monitor.episode import RewindConfig
from rewind.monitor.factory import MonitorConfig
from rewind.rollout.config import RolloutConfig
from rewind.train.policy_api import check_sampler_settings
from rewind.utils.device import check_device

#: Valid ``noise_streams``: one generator per lockstep batch, or one stream per episode.
NOISE_STREAMS = ("batch", "episode")


@dataclass
class VideoConfig:
    """Episode videos (MP4 under ``<out_dir>/videos``, the stage name drawn on each frame).

    Attributes:
        episodes: record the first this many episodes (0: no videos).
        fps: frames per second of the MP4 (the control rate is 20 Hz).
    """

    episodes: int = 0
    fps: int = 20

    def __post_init__(self) -> None:
        require(self.episodes >= 0, f"video.episodes must be >= 0; got {self.episodes}")
        require(1 <= self.fps <= 120, f"video.fps must be in [1, 120]; got {self.fps}")


@dataclass
class EvalConfig(CommandConfig):
    """Schema of ``rewind-eval``.

    Attributes:
        policy_path: policy weights: a ``weights/step_XXXXXX`` folder, a ``weights`` folder or a
            training run folder (the latter two follow ``last.json`` to the newest weights).
        env: the task (Hydra group ``env=lift|pick_place|stack3|nut_peg``); its observation and
            action layout must match the one the weights were trained on.
        episodes: number of evaluation episodes; episode ``i`` resets with seed ``seed + i``.
        seed: seed of the first episode (and of the policy's sampling noise).
        noise_streams: how the runner without a monitor seeds the policy's sampling noise: ``batch``
            (one generator per lockstep batch of ``num_envs``, seeded by ``(seed, first episode)``:
            an episode's noise depends on ``num_envs``) or ``episode`` (each episode its own stream,
            seeded by ``(seed, episode seed)`` as the monitored runner seeds it: with one torch
            thread and ``num_envs`` equal to ``rollout.inference_rows``, the episodes execute the
            actions of a monitored run with ``monitor.tide_samples=1 rewind.max_rewinds=0``, so the
            two runners can be paired).
            Runs with a monitor always use per-episode streams.
        num_envs: envs stepped in lockstep with one batched policy call per step.
        device: ``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda`` or ``mps``.
        num_threads: torch intra-op threads (0: torch's default).
        n_action_steps: actions executed per predicted chunk (``None``: the trained value); an
            inference-time choice, in ``[1, horizon - n_obs_steps + 1]``.
        sampler: ``policy`` (as trained), ``ddim`` or ``ddpm`` (diffusion policies: DDPM samples with
            every training step, 10x DDIM-10's inference cost at 100 steps); inference_steps:
            denoising steps (``None``: the sampler's default); ddim_eta: DDIM's ``eta`` (``None``: as
            trained; 1: DDPM-like noise at every step). Inference-time choices.
        perturb: perturbation profile (Hydra group ``perturb=none|nudge|slip|push``; fields of
            ``rewind.envs.wrappers.PerturbationConfig``, all off by default).
        video: episode videos.
        store_out: also write every rollout into this replay store (steps labelled ``policy``).
        round: the ``round`` recorded with rollouts written to ``store_out``.
        wandb: W&B logging of the results (``metrics.jsonl`` is always written).
        progress: show a progress bar.
        monitor: failure monitor (Hydra group ``monitor=none|tide|...``; ``monitor.calibration=FOLDER``
            from ``rewind-calibrate``). With a monitor, ``rollout.batch_size`` episodes run in lockstep.
        rewind: what an alarm does (Hydra group ``rewind=restore|drive``; ``rewind.max_rewinds``).
        rollout: ``rollout.workers=N`` steps the envs in ``N`` worker processes (0: in this
            process), the policy batched here; the records are the same (``docs/rollouts.md``).
            ``rollout.backend=ray`` shards the episodes over Ray actors (``rollout.address``,
            ``rollout.actors``; the same records; no videos).
    """

    policy_path: str = MISSING
    env: EnvConfig = field(default_factory=EnvConfig)
    episodes: int = 50
    seed: int = 0
    num_envs: int = 10
    noise_streams: str = "batch"
    device: str = "auto"
    num_threads: int = 0
    n_action_steps: int | None = None
    sampler: str = "policy"
    inference_steps: int | None = None
    ddim_eta: float | None = None
    perturb: dict[str, Any] = field(default_factory=dict)
    video: VideoConfig = field(default_factory=VideoConfig)
    store_out: str | None = None
    round: int = 0
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    rewind: RewindConfig = field(default_factory=RewindConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def __post_init__(self) -> None:
        require(self.episodes >= 1, f"episodes must be >= 1; got {self.episodes}")
        require(self.seed >= 0, f"seed must be >= 0; got {self.seed}")
        require(self.num_envs >= 1, f"num_envs must be >= 1; got {self.num_envs}")
        check_choice("noise_streams", self.noise_streams, NOISE_STREAMS)
        check_device(self.device)
        require(self.num_threads >= 0, f"num_threads must be >= 0; got {self.num_threads}")
        require(self.round >= 0, f"round must be >= 0; got {self.round}")
        check_sampler_settings(self.sampler, self.inference_steps, self.ddim_eta)
        if self.rollout.backend == "ray":  # (rollout.workers with ray is refused by RolloutConfig)
            require(
                not self.video.episodes,
                "video.episodes needs rollout.backend=local (videos are rendered where an episode runs)",
            )
        self._perturbation = perturbation_config(self.perturb)

    @property
    def perturbation(self) -> PerturbationConfig:
        """The ``perturb`` node as the wrappers' config (checked once, when this config is built)."""
        return self._perturbation
