"""Configuration of :class:`~rewind.policies.diffusion.modeling_diffusion.DiffusionPolicy`."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import check_choice, check_range, require
from rewind.policies.configuration_base import UNetPolicyConfig


@dataclass
class DiffusionConfig(UNetPolicyConfig):
    """Diffusion Policy (temporal U-Net, DDPM training, DDIM or DDPM sampling).

    Inherits chunk timing, encoders, normalization and EMA fields from
    :class:`~rewind.policies.configuration_base.PolicyConfig` and the U-Net fields
    (``down_dims``, ``kernel_size``, ``n_groups``, ``diffusion_step_embed_dim``) from
    :class:`~rewind.policies.configuration_base.UNetPolicyConfig`.

    Attributes:
        num_train_timesteps: diffusion steps of the training noise schedule.
        num_inference_steps: denoising steps when sampling. ``None`` (default) means 10 for DDIM
            and ``num_train_timesteps`` for DDPM; DDPM always uses every training step, so an
            explicit value for DDPM must equal ``num_train_timesteps``.
        scheduler: ``ddim`` (fast, deterministic given the initial noise) or ``ddpm``.
        ddim_eta: DDIM's ``eta``: 0 (the default) samples deterministically from the initial noise;
            1 adds DDPM-like noise at every step (an inference-time choice; ``scheduler=ddim`` only).
        prediction_type: ``epsilon`` (predict the noise) or ``sample`` (predict the clean chunk).
        beta_schedule: a diffusers beta schedule name (``squaredcos_cap_v2`` = cosine).
        beta_start: first beta of ``linear``/``scaled_linear`` schedules.
        beta_end: last beta of ``linear``/``scaled_linear`` schedules.
        clip_sample: clip the predicted clean chunk to ``[-1, 1]`` at each step.
        guidance_last_k: default number of final denoising steps a guidance hook acts on.
    """

    num_train_timesteps: int = 100
    num_inference_steps: int | None = None
    scheduler: str = "ddim"
    ddim_eta: float = 0.0
    prediction_type: str = "epsilon"
    beta_schedule: str = "squaredcos_cap_v2"
    beta_start: float = 0.0001
    beta_end: float = 0.02
    clip_sample: bool = True
    guidance_last_k: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("num_train_timesteps", self.num_train_timesteps, 2)
        check_choice("scheduler", self.scheduler, ["ddim", "ddpm"])
        check_range("ddim_eta", self.ddim_eta, 0.0, 1.0)
        require(
            self.ddim_eta == 0 or self.scheduler == "ddim",
            f"ddim_eta applies to scheduler ddim; got ddim_eta={self.ddim_eta} with {self.scheduler}",
        )
        check_choice("prediction_type", self.prediction_type, ["epsilon", "sample"])
        check_choice("beta_schedule", self.beta_schedule, ["squaredcos_cap_v2", "linear", "scaled_linear"])
        if self.num_inference_steps is not None:
            check_range("num_inference_steps", self.num_inference_steps, 1, self.num_train_timesteps)
            require(
                self.scheduler != "ddpm" or self.num_inference_steps == self.num_train_timesteps,
                f"num_inference_steps must be None or num_train_timesteps={self.num_train_timesteps} "
                f"with scheduler ddpm (DDPM samples with every step); got {self.num_inference_steps}",
            )
        check_range("guidance_last_k", self.guidance_last_k, 0)
        require(
            not self.clip_sample or self.action_norm == "min_max",
            "clip_sample must be false unless action_norm is min_max (it clips to [-1, 1])",
        )

    @property
    def inference_steps(self) -> int:
        """Denoising steps actually used when sampling (see ``num_inference_steps``)."""
        if self.scheduler == "ddpm":
            return self.num_train_timesteps
        return 10 if self.num_inference_steps is None else self.num_inference_steps
