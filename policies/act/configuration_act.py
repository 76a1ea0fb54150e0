"""Configuration of the ACT policy (Action Chunking with Transformers, CVAE variant).

Every field is checked in :meth:`ACTConfig.__post_init__`; an invalid value raises ``ValueError``
with a message naming the field, e.g. ``kl_weight must be >= 0; got -1.0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewind.config import check_range, require
from rewind.policies.configuration_base import PolicyConfig


@dataclass
class ACTConfig(PolicyConfig):
    """Hyper-parameters of :class:`~rewind.policies.act.modeling_act.ACTPolicy`.

    Shared fields (chunk timing, observation keys and encoders, normalization, ``seed``, EMA) are
    documented in :class:`~rewind.policies.configuration_base.PolicyConfig`. ACT's defaults differ
    there in: ``n_obs_steps`` 1 (ACT conditions on the current observation) and ``mean_std``
    normalization of actions and observations (as in ACT). Sizes are chosen for CPU training on
    state observations; ``horizon`` 16 and ``n_action_steps`` 8 match the monitor's chunk setting,
    so TIDE scores are comparable across policies.

    Attributes:
        d_model: transformer width.
        n_heads: attention heads (must divide ``d_model``).
        dim_feedforward: hidden size of the transformer feed-forward blocks.
        n_encoder_layers: layers of the main (observation) transformer encoder.
        n_decoder_layers: layers of the action decoder (queries cross-attend to the encoder memory);
            1 by default, as the reference ACT implementation effectively uses (and cheaper on CPU).
        n_vae_encoder_layers: layers of the CVAE posterior encoder over the action chunk.
        dropout: dropout inside the transformers, in [0, 1).
        pre_norm: LayerNorm before (True) or after (False) each attention / feed-forward block.
        use_vae: train with the CVAE latent (False: ``z`` is always 0 and there is no KL term).
        latent_dim: dimension of the CVAE latent ``z``.
        kl_weight: weight of the KL term in the loss (>= 0).
        vae_use_obs: add an observation token (mean of the observation tokens) to the posterior
            encoder's input, next to CLS and the action tokens.
        temporal_ensemble_coeff: ``m`` of ACT's temporal ensembling (``None``: off; requires
            ``n_action_steps = 1``). When set, a chunk is predicted at every step and the executed
            action averages every pending chunk's prediction for that step with weights
            ``w_i = exp(-m * i)``, ``i = 0`` the oldest (see :mod:`rewind.policies.act.ensemble`).
    """

    n_obs_steps: int = 1
    action_norm: str = "mean_std"
    obs_norm: str = "mean_std"
    d_model: int = 256
    n_heads: int = 8
    dim_feedforward: int = 1024
    n_encoder_layers: int = 4
    n_decoder_layers: int = 1
    n_vae_encoder_layers: int = 4
    dropout: float = 0.1
    pre_norm: bool = True
    use_vae: bool = True
    latent_dim: int = 32
    kl_weight: float = 10.0
    vae_use_obs: bool = True
    temporal_ensemble_coeff: float | None = None

    def __post_init__(self) -> None:
        """Check ranges and cross-field constraints; raise ``ValueError`` naming the field."""
        super().__post_init__()
        for name in (
            "d_model",
            "n_heads",
            "dim_feedforward",
            "n_encoder_layers",
            "n_decoder_layers",
            "n_vae_encoder_layers",
            "latent_dim",
        ):
            check_range(name, getattr(self, name), 1)
        require(
            self.d_model % self.n_heads == 0,
            f"n_heads must divide d_model = {self.d_model}; got {self.n_heads}",
        )
        require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1); got {self.dropout}")
        check_range("kl_weight", self.kl_weight, 0.0)
        if self.temporal_ensemble_coeff is not None:
            check_range("temporal_ensemble_coeff", self.temporal_ensemble_coeff, 0.0)
            require(
                self.n_action_steps == 1,
                "n_action_steps must be 1 when temporal_ensemble_coeff is set "
                f"(a chunk is predicted at every step); got {self.n_action_steps}",
            )
