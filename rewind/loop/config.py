"""Schema of ``rewind-loop`` (``configs/loop.yaml``): the base policy, the recovery source, fine-tuning,
calibration and evaluation of every round.

Groups: ``env=``, ``recovery=retry|operator|dagger|human|guided`` (``configs/recovery/``),
``finetune=ft|fs`` (``configs/finetune/``), ``monitor=tide|...`` and ``policy@base.policy=`` (the
architecture of a base policy the loop trains itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rewind.config import CommandConfig, check_choice, require
from rewind.envs.config import EnvConfig
from rewind.envs.operators.human_like import OperatorModelConfig
from rewind.loop.guided import GuidedConfig
from rewind.loop.label_conflict import ConflictFilterConfig
from rewind.metrics import WandbConfig
from rewind.monitor.episode import check_rewind_mode
from rewind.monitor.factory import MonitorConfig
from rewind.rollout.config import RolloutConfig
from rewind.train.config import NORMALIZER_MODES, SAMPLE_WEIGHT_MODES, policy_config
from rewind.train.policy_api import check_sampler_settings
from rewind.utils.device import check_device

#: name -> ``module:Class`` (imported on use by :func:`rewind.loop.sources.source_class`).
RECOVERY_SOURCES: dict[str, str] = {
    "retry": "rewind.loop.sources:RetrySource",
    "operator": "rewind.loop.sources:OperatorSource",
    "dagger": "rewind.loop.sources:DaggerSource",
    "human": "rewind.loop.sources:HumanSource",
    "guided": "rewind.loop.guided_source:GuidedSource",
}
#: Which episodes a round stores (``recovery.keep``).
KEEP_RULES = ("all", "useful", "success", "intervened")
#: Who is behind ``recovery=human``.
PERSONS = ("teleop", "scripted")
FINETUNE_MODES = ("ft", "fs")
AFTER_MODES = ("end", "handback")
UNTIL_MODES = ("stage", "task", "failed")
#: ``promotion.rule``: deploy every round's weights, or only those not worse on the selection seeds.
PROMOTION_RULES = ("always", "not_worse")
#: ``promotion.floor``: none, or the base policy (round 0) as a second reference for every candidate.
PROMOTION_FLOORS = ("none", "base")


@dataclass
class BaseConfig:
    """Round 0: the policy the loop starts from, built by the loop unless ``policy_path`` is given.

    Attributes:
        policy_path: existing policy weights (a run folder, ``weights`` folder or ``step_XXXXXX``);
            ``None``: collect ``demos`` scripted demos and train a base policy on them.
        demos_path: the demo store of ``policy_path`` (default: the store its weights were trained on).
        demos: scripted demos to collect when the loop builds the base (seeds ``0..demos-1``).
        steps / batch_size / lr / warmup_steps: training of the base policy.
        policy: the base policy's architecture (Hydra group ``policy@base.policy=diffusion|flow|act``).
    """

    policy_path: str | None = None
    demos_path: str | None = None
    demos: int = 20
    steps: int = 2000
    batch_size: int = 64
    lr: float = 5e-4
    warmup_steps: int = 200
    policy: dict[str, Any] = field(default_factory=lambda: {"name": "diffusion"})

    def __post_init__(self) -> None:
        require(self.demos >= 1, f"base.demos must be >= 1; got {self.demos}")
        for name in ("steps", "batch_size"):
            require(getattr(self, name) >= 1, f"base.{name} must be >= 1; got {getattr(self, name)}")
        require(self.lr > 0, f"base.lr must be > 0; got {self.lr}")
        require(self.warmup_steps >= 0, f"base.warmup_steps must be >= 0; got {self.warmup_steps}")
        if self.policy_path is None:
            policy_config(self.policy)


@dataclass
class RecoveryConfig:
    """Where a round's new data comes from (Hydra group ``recovery=``; ``configs/recovery/*.yaml``).

    Attributes:
        name: the recovery source: ``retry`` (rewind and let the policy try again), ``operator``
            (RaC: drive back = ``recovery``, the scripted operator completes the stage =
            ``correction``), ``dagger`` (HG-DAgger: the operator takes over, no rewind), ``human``
            (a person through ``rewind-teleop``, or a stand-in), ``guided`` (ReGuide, no operator).
        after: after an intervention, ``end`` the episode (RaC) or ``handback`` to the policy.
        until: (operator, dagger) the operator corrects until the current ``stage`` (the stage the
            rewind lands in), the whole ``task``, or the stage the episode ``failed`` in (the stage at the
            trigger: after a drive back that lost the object the operator redoes the earlier stages
            too, with ``max_correction_steps`` for each) is done. For dagger ``failed`` is ``stage``.
        rewind_mode: (operator, retry) ``drive`` (recorded ``recovery`` steps) or ``restore``.
        max_interventions: interventions (or retries) per episode; later alarms are only logged.
        max_correction_steps: operator step budget of one intervention (``until=failed``: of each
            stage it redoes).
        stall_steps: also intervene when the task stage has not advanced for this many policy steps
            (what a person watching would notice); ``0``: no stall trigger at all (only monitor alarms
            trigger), whatever ``stall_from_demos`` says.
        stall_from_demos: a factor ``f > 0``: size the stall threshold from the demos instead,
            ``stall_steps = ceil(f * q)`` with ``q`` the ``stall_percentile``-th percentile of the demos'
            stage durations (steps between two advances of the best stage, successful demos only, up to
            success; :mod:`rewind.loop.stall`), computed once per loop (``stall.json``); replaces a
            non-zero ``stall_steps`` (the recovery configs' default: 1.5, which gives PickPlace's 30).
            ``None``: ``stall_steps`` as given.
        stall_percentile: the percentile of the demo stage durations ``stall_from_demos`` scales.
        keep: which episodes are stored: ``all``, ``useful`` (successful or intervened), ``success``
            or ``intervened``.
        pre_intervention_steps: policy steps before an intervention labelled ``pre_intervention``.
        operator_noise: action noise std of the scripted operator (as for demos).
        person: (human) ``teleop``: a person with ``rewind-teleop`` fills the round's store (the loop
            prints the command and waits); ``scripted``: the scripted operator stands in, labelled ``human``.
        guided: (guided) ReGuide settings.
        operator_model: who drives the operator's steps: ``perfect`` (the scripted operator) or
            ``human_like`` (delayed, noisy, speed-capped, failing more far from the demos; Hydra group
            ``recovery/operator_model=``, ``configs/recovery/operator_model/``).
    """

    name: str = "operator"
    after: str = "end"
    until: str = "stage"
    rewind_mode: str = "drive"
    max_interventions: int = 1
    max_correction_steps: int = 150
    stall_steps: int = 0
    stall_from_demos: float | None = None
    stall_percentile: float = 95.0
    keep: str = "useful"
    pre_intervention_steps: int = 15
    operator_noise: float = 0.05
    person: str = "teleop"
    guided: GuidedConfig = field(default_factory=GuidedConfig)
    operator_model: OperatorModelConfig = field(default_factory=OperatorModelConfig)

    def __post_init__(self) -> None:
        checks = (
            ("name", RECOVERY_SOURCES),
            ("after", AFTER_MODES),
            ("until", UNTIL_MODES),
            ("keep", KEEP_RULES),
            ("person", PERSONS),
        )
        for key, valid in checks:
            check_choice(f"recovery.{key}", getattr(self, key), valid)
        check_rewind_mode(self.rewind_mode, "recovery.rewind_mode")
        for key in ("max_interventions", "max_correction_steps"):
            require(getattr(self, key) >= 1, f"recovery.{key} must be >= 1; got {getattr(self, key)}")
        require(self.stall_steps >= 0, f"recovery.stall_steps must be >= 0; got {self.stall_steps}")
        f = self.stall_from_demos
        require(
            f is None or (math.isfinite(f) and f > 0),
            f"recovery.stall_from_demos must be null or a factor > 0; got {f}",
        )
        p = self.stall_percentile
        require(0.0 <= p <= 100.0, f"recovery.stall_percentile must be in [0, 100]; got {p}")
        require(self.operator_noise >= 0, f"recovery.operator_noise must be >= 0; got {self.operator_noise}")
        require(
            self.pre_intervention_steps >= 0,
            f"recovery.pre_intervention_steps must be >= 0; got {self.pre_intervention_steps}",
        )

    @property
    def stalls(self) -> bool:
        """A stall can trigger an intervention (``stall_steps > 0``; ``stall_from_demos`` may resize it)."""
        return self.stall_steps > 0


@dataclass
class FinetuneConfig:
    """How each round trains its new policy (Hydra group ``finetune=ft|fs``).

    Attributes:
        mode: ``ft`` continues from the previous round's weights on a mix of the demos and the
            rounds' data; ``fs`` retrains from scratch on everything (demos + every round).
        steps / batch_size / lr / warmup_steps: the optimisation of one round.
        demo_share: (ft) expected share of demo windows per batch; the rest are the rounds' data
            (ReGuide: 0.2); ``null`` (fs default): windows drawn uniformly from everything.
        max_passes: (ft) cap on the expected passes over the rounds' data in one fine-tuning: their
            share of the batch shrinks (the demos take the rest) so that ``steps * batch_size *
            share <= max_passes * their steps``; ``null``: no cap (the share is ``1 - demo_share``).
        sample_weights: per-source sample weights of the training data, on top of the recovery source's
            defaults (dagger, human: ``{policy: 0, pre_intervention: 0}``, i.e. the intervention
            segments only, as RaC and HG-DAgger train; operator: also ``recovery: 0``, the scripted
            drive back is stored but not trained on; retry, guided: every kept step).
            Sirius-style: ``'+finetune.sample_weights={policy: 1.0, correction: 2.0}'`` (the ``+``
            lets Hydra add keys to the empty mapping).
        sample_weight_mode: ``sample`` (windows drawn in proportion to their weight; weight-0 windows never)
            or ``loss`` (uniform windows, weighted loss); see ``rewind-train``'s ``data.sample_weight_mode``.
        normalizer: ``keep`` the base policy's normalizer (default) or ``refit`` it to all the data.
        all_rounds: train on the data of every round so far (aggregation, DAgger-style); ``false``:
            only the latest round's.
        conflict_filter: before each fine-tuning, leave out the rounds' correction steps whose action
            conflicts with the demos' in the nearest states of the deployed policy's feature space
            (:class:`rewind.loop.label_conflict.ConflictFilterConfig`; off by default).
    """

    mode: str = "ft"
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-4
    warmup_steps: int = 50
    demo_share: float | None = 0.2
    max_passes: float | None = None
    sample_weights: dict[str, float] = field(default_factory=dict)
    sample_weight_mode: str = "sample"
    normalizer: str = "keep"
    all_rounds: bool = True
    conflict_filter: ConflictFilterConfig = field(default_factory=ConflictFilterConfig)

    def __post_init__(self) -> None:
        require(
            self.mode in FINETUNE_MODES,
            f"finetune.mode must be one of [{', '.join(FINETUNE_MODES)}]; got '{self.mode}'",
        )
        for name in ("steps", "batch_size"):
            require(getattr(self, name) >= 1, f"finetune.{name} must be >= 1; got {getattr(self, name)}")
        require(self.lr > 0, f"finetune.lr must be > 0; got {self.lr}")
        require(self.warmup_steps >= 0, f"finetune.warmup_steps must be >= 0; got {self.warmup_steps}")
        require(
            self.demo_share is None or 0.0 <= self.demo_share < 1.0,
            f"finetune.demo_share must be null or in [0, 1); got {self.demo_share}",
        )
        require(
            self.max_passes is None or self.max_passes > 0,
            f"finetune.max_passes must be null or > 0; got {self.max_passes}",
        )
        check_choice("finetune.sample_weight_mode", self.sample_weight_mode, SAMPLE_WEIGHT_MODES)
        require(
            self.normalizer in NORMALIZER_MODES,
            f"finetune.normalizer must be one of [{', '.join(NORMALIZER_MODES)}]; got '{self.normalizer}'",
        )
        for source, w in self.sample_weights.items():
            require(w >= 0, f"finetune.sample_weights.{source} must be >= 0; got {w}")


@dataclass
class EvalSettings:
    """Evaluation of every round's policy (``rewind-eval``: batched, 95% Wilson interval).

    Attributes:
        episodes: evaluation episodes (seeds ``seed..seed+episodes-1``, the same every round).
        seed: first evaluation seed (demos use ``0..``, calibration ``calibration.seed..``).
        num_envs: envs stepped in lockstep.
        rewind: also evaluate with test-time rewind (monitor + ``restore``) on the same seeds.
    """

    episodes: int = 100
    seed: int = 10000
    num_envs: int = 10
    rewind: bool = False

    def __post_init__(self) -> None:
        require(self.episodes >= 1, f"eval.episodes must be >= 1; got {self.episodes}")
        require(self.seed >= 0, f"eval.seed must be >= 0; got {self.seed}")
        require(self.num_envs >= 1, f"eval.num_envs must be >= 1; got {self.num_envs}")


@dataclass
class PromotionSettings:
    """Whether a round's fine-tuned weights replace the deployed policy (a promotion gate).

    ``rule=not_worse`` (the default) first evaluates the candidate on ``episodes`` selection seeds
    (``seed..``, used for nothing else: not the evaluation, calibration or collection seeds) and
    deploys it only when its success is at least the deployed policy's minus ``tolerance``; otherwise
    the round keeps the deployed weights (its data stays in the pool for later rounds) and records the
    rejected candidate. The control arm passes the same gate against its own deployed policy.
    ``rule=always`` deploys every round's weights (the loop before the gate existed).
    ``floor=base`` (the default) also holds every candidate to the base policy's (round 0's)
    selection success minus ``tolerance``, so that tolerances granted round after round cannot add up
    to a deployed policy further below the base than one tolerance (``none``: the deployed policy is
    the only reference, as before 2026-12-07).

    Attributes:
        rule: ``always`` or ``not_worse``.
        episodes: selection episodes per candidate.
        seed: first selection seed.
        tolerance: how far (success rate) below the deployed policy a candidate may be and still deploy.
        floor: ``none`` or ``base``.
    """

    rule: str = "not_worse"
    episodes: int = 100
    seed: int = 60000
    tolerance: float = 0.05
    floor: str = "base"

    def __post_init__(self) -> None:
        check_choice("promotion.rule", self.rule, PROMOTION_RULES)
        check_choice("promotion.floor", self.floor, PROMOTION_FLOORS)
        require(self.episodes >= 1, f"promotion.episodes must be >= 1; got {self.episodes}")
        require(self.seed >= 0, f"promotion.seed must be >= 0; got {self.seed}")
        require(0.0 <= self.tolerance <= 1.0, f"promotion.tolerance must be in [0, 1]; got {self.tolerance}")

    @property
    def gated(self) -> bool:
        """Candidates are evaluated and may be rejected."""
        return self.rule != "always"


@dataclass
class CalibrationSettings:
    """Calibration of the monitor for every round's weights (as ``rewind-calibrate``).

    Attributes:
        episodes: calibration rollouts (only the successful ones calibrate).
        seed: first calibration seed.
        max_demos: demos labelled for the checkpoint library.
        fallback: with fewer successes than ``monitor.alpha`` needs, use the smallest alpha they allow
            (``1/(n+1)``, recorded in the round) instead of failing.
    """

    episodes: int = 30
    seed: int = 20000
    max_demos: int = 30
    fallback: bool = True

    def __post_init__(self) -> None:
        require(self.episodes >= 1, f"calibration.episodes must be >= 1; got {self.episodes}")
        require(self.seed >= 0, f"calibration.seed must be >= 0; got {self.seed}")
        require(self.max_demos >= 1, f"calibration.max_demos must be >= 1; got {self.max_demos}")


@dataclass
class LoopConfig(CommandConfig):
    """Schema of ``rewind-loop``.

    Attributes:
        env: the task (Hydra group ``env=``).
        rounds: recovery rounds after the base (round 0); a resumed loop may raise it.
        episodes_per_round: monitored episodes collected per round.
        collect_seed: seed of the first collected episode (round ``r`` starts at
            ``collect_seed + (r - 1) * episodes_per_round``).
        base / recovery / finetune / monitor / calibration / eval: see their classes.
        seed: seeds the training runs (round ``r`` trains with ``seed + r``, so with ``finetune=fs`` the
            control arm of loop seeds ``s`` and ``s + 1`` trains the same weights in rounds ``r + 1`` and ``r``).
        rollout: how the calibration, evaluation and collection rollouts run (the ``rollout`` node of
            ``rewind-eval`` and ``rewind-calibrate``: ``rollout.workers``, ``rollout.batch_size``,
            ``rollout.backend=ray`` for the evaluations; calibration and collection always run here,
            with workers). The results do not depend on it (``inference_rows`` aside); the collection
            with ``recovery=human`` or ``guided`` runs one episode at a time in this process whatever
            it says (``docs/rollouts.md``).
        control: every round also fine-tunes a control policy the same way on the demos alone (same
            steps and seed; its own lineage from the base) and evaluates it on the same seeds: what the
            round's new data adds beyond more training.
        parallel_control: run each round's control arm in its own process while the round collects and
            fine-tunes (a second core makes it free; the records are the same as with ``false``, which
            runs it in this process after the fine-tuning; :mod:`rewind.loop.control_arm`).
        device / num_threads: torch device and intra-op threads (1 is fastest on a busy 2-core CPU).
        ddim_eta: DDIM's ``eta`` for every rollout of the loop (collection, calibration, selection,
            evaluation, the control arm's), overriding the policies' own (``None``: as trained); the
            way to run a loop from an existing base with another sampler (docs/policies.md). The
            teleop tool (``recovery=human``) samples as trained.
        wandb: the loop's one W&B run (per-round table, success-vs-operator-steps chart).
        progress: progress bars.
    """

    env: EnvConfig = field(default_factory=lambda: EnvConfig(name="pick_place"))
    rounds: int = 2
    episodes_per_round: int = 60
    collect_seed: int = 30000
    base: BaseConfig = field(default_factory=BaseConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    monitor: MonitorConfig = field(default_factory=lambda: MonitorConfig(score="tide", alpha=0.2))
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    promotion: PromotionSettings = field(default_factory=PromotionSettings)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    seed: int = 0
    control: bool = True
    parallel_control: bool = True
    device: str = "cpu"
    num_threads: int = 1
    ddim_eta: float | None = None
    wandb: WandbConfig = field(default_factory=WandbConfig)
    progress: bool = True

    def __post_init__(self) -> None:
        check_sampler_settings("policy", None, self.ddim_eta)
        require(self.rounds >= 0, f"rounds must be >= 0; got {self.rounds}")
        require(
            self.episodes_per_round >= 1, f"episodes_per_round must be >= 1; got {self.episodes_per_round}"
        )
        require(self.collect_seed >= 0, f"collect_seed must be >= 0; got {self.collect_seed}")
        require(self.seed >= 0, f"seed must be >= 0; got {self.seed}")
        check_device(self.device)
        require(self.num_threads >= 0, f"num_threads must be >= 0; got {self.num_threads}")
        require(
            self.monitor.enabled or self.recovery.stalls or self.recovery.name == "guided",
            "monitor=none leaves nothing to trigger an intervention: choose a score (monitor=tide) "
            "or recovery.stall_steps=N (or recovery.stall_from_demos=F with stall_steps > 0)",
        )
