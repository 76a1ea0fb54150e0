"""Configuration of :class:`~rewind.policies.flow.modeling_flow.FlowPolicy`."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import check_choice, check_range, require
from rewind.policies.configuration_base import UNetPolicyConfig


@dataclass
class FlowConfig(UNetPolicyConfig):
    """Flow-matching (rectified flow) policy on the same temporal U-Net as Diffusion Policy.

    Inherits chunk timing, encoders, normalization, EMA and U-Net fields from
    :class:`~rewind.policies.configuration_base.UNetPolicyConfig`.

    Attributes:
        num_inference_steps: Euler steps from noise (``t = 0``) to actions (``t = 1``).
        time_sampling: training distribution of ``t``: ``uniform`` on [0, 1] or ``logit_normal``
            (``sigmoid(N(time_mean, time_std))``, more weight on the middle of the path).
        time_mean: mean of the logit-normal.
        time_std: std of the logit-normal.
        time_scale: multiplies ``t`` in [0, 1] before the sinusoidal embedding.
        clip_sample: clamp the final chunk to [-1, 1] (only with ``action_norm = min_max``).
        guidance_last_k: default number of final Euler steps a guidance hook acts on.
    """

    num_inference_steps: int = 10
    time_sampling: str = "uniform"
    time_mean: float = 0.0
    time_std: float = 1.0
    time_scale: float = 1000.0
    clip_sample: bool = True
    guidance_last_k: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("num_inference_steps", self.num_inference_steps, 1)
        check_choice("time_sampling", self.time_sampling, ["uniform", "logit_normal"])
        check_range("time_std", self.time_std, 1e-6)
        check_range("time_scale", self.time_scale, 1e-6)
        check_range("guidance_last_k", self.guidance_last_k, 0, self.num_inference_steps)
        require(
            not self.clip_sample or self.action_norm == "min_max",
            "clip_sample must be false unless action_norm is min_max (it clips to [-1, 1])",
        )
