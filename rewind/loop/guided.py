"""ReGuide-style guided rollouts (``recovery=guided``): placeholder, filled in below."""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import require


@dataclass
class GuidedConfig:
    """ReGuide settings (``recovery=guided``).

    Attributes:
        phases: macro-phases the demo latents are clustered into (k-means, ordered by mean time).
        prototypes: prototypes (k-means centres) per phase.
        pca_dim: latents are projected to this many principal components first.
        horizon: control steps ahead the latent dynamics model predicts.
        low_pct / high_pct: per-phase percentiles of the drift on base rollouts; guidance is on only
            when ``d_low < d <= d_high`` (drifted but recoverable; ReGuide uses 30/90 for Can).
        scale: guidance step ``c`` on the clean-action estimate (ReGuide: 0.01).
        last_k: denoising steps (the last ones) in which guidance is applied.
        temperature: softmin temperature of the distance to a phase's prototypes.
        rollouts: base-policy rollouts the latent dynamics model is trained on.
        dynamics_steps: gradient steps of the latent dynamics model.
    """

    phases: int = 3
    prototypes: int = 4
    pca_dim: int = 16
    horizon: int = 8
    low_pct: float = 30.0
    high_pct: float = 90.0
    scale: float = 0.01
    last_k: int = 3
    temperature: float = 1.0
    rollouts: int = 20
    dynamics_steps: int = 500

    def __post_init__(self) -> None:
        for name in ("phases", "prototypes", "pca_dim", "horizon", "last_k", "rollouts", "dynamics_steps"):
            require(
                getattr(self, name) >= 1, f"recovery.guided.{name} must be >= 1; got {getattr(self, name)}"
            )
        require(
            0.0 <= self.low_pct < self.high_pct <= 100.0,
            f"recovery.guided needs 0 <= low_pct < high_pct <= 100; got {self.low_pct}, {self.high_pct}",
        )
        require(self.scale > 0, f"recovery.guided.scale must be > 0; got {self.scale}")
        require(self.temperature > 0, f"recovery.guided.temperature must be > 0; got {self.temperature}")
