"""Schema of ``rewind-train`` (``configs/train.yaml``): data, policy, optimisation, logging, resume.

The ``policy`` node is a plain mapping in the schema (Hydra group ``policy=diffusion|flow|act``,
``configs/policy/*.yaml``) because its fields depend on ``policy.name``. :class:`TrainConfig` validates
it at start by converting it with the registry's config class (:func:`policy_config`), so a
misspelled policy key fails before anything runs, with a message naming the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rewind.config import CommandConfig, ConfigError, check_choice, require, to_dataclass
from rewind.envs.config import EnvConfig
from rewind.metrics import WandbConfig
from rewind.store.windows import SOURCE_BOUNDARY_MODES, UNDONE_MODES
from rewind.train.distributed import BACKENDS, check_global_batch
from rewind.utils.device import check_device
from rewind.utils.ranks import launch_ranks

SAMPLE_WEIGHT_MODES = ("loss", "sample")
NORMALIZER_MODES = ("keep", "refit")


@dataclass
class DataConfig:
    """Where the training windows come from.

    Attributes:
        path: the replay store to train on (``rewind-collect ... out=PATH``).
        extra_paths: further stores trained on together with ``path`` (same env and layout), e.g.
            the recovery data of fine-tuning rounds next to the demos.
        mix: expected share of each store's windows in a batch, in the order ``[path, *extra_paths]``
            (normalised to sum 1; e.g. ``[0.2, 0.8]`` for 20% demos); ``[]``: every window of every
            store equally likely (the stores are simply concatenated).
        val_fraction: fraction of episodes held out for the validation loss (at least one episode
            when > 0 and the store has two or more); 0 disables validation.
        sample_weights: per-step source -> sample weight (e.g. ``{recovery: 2.0, pre_intervention: 0}``);
            sources not listed weigh 1.
        sample_weight_mode: ``loss`` (uniform windows, weighted loss) or ``sample`` (weighted sampling).
        mask_zero_sample_weight: exclude the action targets of steps whose source weighs 0 from the loss (a
            window anchored on a correction then learns only the operator's actions, not the
            policy's actions after the hand-back that share its chunk).
        undone: steps undone by a ``restore`` rewind (segments of their own in the store):
            ``drop`` (default) leaves them out of training, ``keep`` trains on them as well.
        source_boundaries: ``respect``: a window anchored on an intervention step
            (recovery, correction, human) supervises only that intervention's actions, not the
            policy's around it; ``ignore`` (default until the loop is re-measured with ``respect``):
            every step of the window is a target.
        drop_steps_paths: per store (``[path, *extra_paths]``) a file of steps to leave out of
            training (``rewind.store.windows.write_drop_steps``; ``null``: none), or ``[]``. A dropped
            step is never a window's anchor nor a target; the store is not changed. The loop's
            label-conflict filter writes them (``finetune.conflict_filter``).
        val_batches: batches averaged for one validation loss.
    """

    path: str = MISSING
    extra_paths: list[str] = field(default_factory=list)
    mix: list[float] = field(default_factory=list)
    val_fraction: float = 0.1
    sample_weights: dict[str, float] = field(default_factory=dict)
    sample_weight_mode: str = "loss"
    mask_zero_sample_weight: bool = False
    undone: str = "drop"
    source_boundaries: str = "ignore"
    drop_steps_paths: list[str | None] = field(default_factory=list)
    val_batches: int = 4

    def __post_init__(self) -> None:
        require(
            0.0 <= self.val_fraction < 1.0, f"data.val_fraction must be in [0, 1); got {self.val_fraction}"
        )
        check_choice("data.sample_weight_mode", self.sample_weight_mode, SAMPLE_WEIGHT_MODES)
        for key, value, valid in (
            ("undone", self.undone, UNDONE_MODES),
            ("source_boundaries", self.source_boundaries, SOURCE_BOUNDARY_MODES),
        ):
            require(value in valid, f"data.{key} must be one of [{', '.join(valid)}]; got '{value}'")
        require(self.val_batches >= 1, f"data.val_batches must be >= 1; got {self.val_batches}")
        n = 1 + len(self.extra_paths)
        require(
            not self.mix or len(self.mix) == n,
            f"data.mix needs one share per store ({n}: path + extra_paths) or []; got {list(self.mix)}",
        )
        require(
            not self.drop_steps_paths or len(self.drop_steps_paths) == n,
            f"data.drop_steps_paths needs one entry (a file or null) per store ({n}: path + extra_paths) "
            f"or []; got {len(self.drop_steps_paths)}",
        )
        require(
            all(m >= 0 for m in self.mix) and (not self.mix or sum(self.mix) > 0),
            f"data.mix shares must be >= 0 with a positive sum; got {list(self.mix)}",
        )

    @property
    def paths(self) -> list[str]:
        """Every store trained on: ``[path, *extra_paths]``."""
        return [self.path, *self.extra_paths]


@dataclass
class InitConfig:
    """Start from existing policy weights (fine-tuning) instead of a fresh initialisation.

    Attributes:
        from_weights: a policy weights folder (``weights/step_XXXXXX``), a ``weights`` folder or a
            training run folder (its newest weights); ``None``: fresh initialisation. The ``policy``
            node must equal the weights' policy config (the error names the keys that differ).
        load_weights: load the network parameters; ``false`` keeps a fresh initialisation and takes
            only the normalizer (retraining from scratch with the parent's normalization).
        normalizer: ``keep`` the weights' normalizer statistics, or ``refit`` them to this run's
            training data.
    """

    from_weights: str | None = None
    load_weights: bool = True
    normalizer: str = "keep"

    def __post_init__(self) -> None:
        require(
            self.normalizer in NORMALIZER_MODES,
            f"init.normalizer must be one of [{', '.join(NORMALIZER_MODES)}]; got '{self.normalizer}'",
        )
        require(
            self.from_weights is None or self.load_weights or self.normalizer == "keep",
            "init: load_weights=false with normalizer=refit takes nothing from init.from_weights",
        )


@dataclass
class OptimConfig:
    """The optimisation loop (the ``train`` node).

    Attributes:
        steps: total gradient steps of the run (a resumed run continues up to this number).
        batch_size: windows per gradient step: the GLOBAL batch under torchrun (each of the N processes
            trains on ``batch_size / N`` of them; it must divide).
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay.
        warmup_steps: linear warm-up steps before the schedule.
        lr_schedule: a ``diffusers.optimization.get_scheduler`` name (cosine, linear, constant, ...).
        ema: keep an exponential moving average of the weights; the saved policy weights are the EMA
            (its decay schedule comes from the policy config's ``ema_*`` fields).
        grad_clip: clip the global gradient norm to this value (0: off).
        save_every: save policy weights + training state every this many steps (and at the end).
        val_every: compute the validation loss every this many steps (0: only at the end).
        log_every: log training metrics every this many steps.
    """

    steps: int = 1000
    batch_size: int = 256
    lr: float = 5e-4
    weight_decay: float = 1e-6
    warmup_steps: int = 500
    lr_schedule: str = "cosine"
    ema: bool = True
    grad_clip: float = 1.0
    save_every: int = 1000
    val_every: int = 500
    log_every: int = 10

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "save_every", "log_every"):
            require(getattr(self, name) >= 1, f"train.{name} must be >= 1; got {getattr(self, name)}")
        for name in ("warmup_steps", "val_every"):
            require(getattr(self, name) >= 0, f"train.{name} must be >= 0; got {getattr(self, name)}")
        require(self.lr > 0, f"train.lr must be > 0; got {self.lr}")
        require(self.weight_decay >= 0, f"train.weight_decay must be >= 0; got {self.weight_decay}")
        require(self.grad_clip >= 0, f"train.grad_clip must be >= 0; got {self.grad_clip}")
        valid = ("cosine", "linear", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial")
        require(
            self.lr_schedule in valid,
            f"train.lr_schedule must be one of [{', '.join(valid)}]; got '{self.lr_schedule}'",
        )


@dataclass
class TrainConfig(CommandConfig):
    """Schema of ``rewind-train``.

    Attributes:
        env: the task the data comes from (names the run; checked against the store's env id).
        data: the replay store and how windows are drawn from it.
        policy: policy hyper-parameters; ``policy.name`` picks the registry entry (diffusion, flow,
            act), the other keys are fields of that policy's config dataclass.
        train: the optimisation loop.
        device: ``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda`` or ``mps``.
        bf16: bfloat16 autocast for forward/loss on CUDA (ignored elsewhere).
        compile: wrap the policy's ``compute_loss`` with ``torch.compile``.
        seed: seeds every generator of the run (window sampler, noise, dropout, initialisation).
        num_threads: torch intra-op threads (0: torch's default).
        wandb: W&B logging.
        resume: continue the run in ``out_dir`` from its last saved training state (fresh if none).
        progress: show a progress bar.
        init: start from existing policy weights (fine-tuning; see :class:`InitConfig`).
        dist_backend: process-group backend under torchrun: ``auto`` (NCCL on CUDA, gloo otherwise),
            ``gloo`` or ``nccl`` (:mod:`rewind.train.distributed`); unused by a plain process.
    """

    env: EnvConfig = field(default_factory=EnvConfig)
    data: DataConfig = field(default_factory=DataConfig)
    policy: dict[str, Any] = field(default_factory=dict)
    train: OptimConfig = field(default_factory=OptimConfig)
    device: str = "auto"
    bf16: bool = True
    compile: bool = False
    seed: int = 0
    num_threads: int = 0
    wandb: WandbConfig = field(default_factory=WandbConfig)
    resume: bool = False
    progress: bool = True
    init: InitConfig = field(default_factory=InitConfig)
    dist_backend: str = "auto"

    def __post_init__(self) -> None:
        check_device(self.device)
        check_choice("dist_backend", self.dist_backend, BACKENDS)
        check_global_batch(self.train.batch_size, launch_ranks().world_size)
        require(self.seed >= 0, f"seed must be >= 0; got {self.seed}")
        require(self.num_threads >= 0, f"num_threads must be >= 0; got {self.num_threads}")
        policy_config(self.policy)

    @property
    def policy_name(self) -> str:
        """``policy.name``."""
        return str(self.policy["name"])


def policy_config(policy: dict[str, Any]) -> Any:
    """Build the registry's config dataclass from the ``policy`` node (``name`` + its fields).

    Raises:
        ConfigError: no ``name``, an unknown policy, an unknown key or an invalid value.
    """
    from rewind.train.policy_api import policy_config_class

    fields = dict(policy)
    name = fields.pop("name", None)
    require(name is not None, "policy.name is missing (choose a group: policy=diffusion|flow|act)")
    cls = policy_config_class(str(name))
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(
            f"policy.{unknown[0]}: not a field of {cls.__name__} (policy '{name}'); "
            f"valid keys: {', '.join(sorted(known))}"
        )
    try:
        return to_dataclass(fields, cls)
    except ConfigError as exc:
        raise ConfigError(f"policy ({name}): {exc}") from exc
