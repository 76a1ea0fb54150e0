"""Typed round records: what ``round_NN/round.json`` holds, with a JSON round trip and a schema version.

``round.json`` (written atomically as a round's last act, :func:`rewind.loop.lineage.mark_done`)::

    {"schema_version": 2, "round": r,
     "policy": {"version", "weights", "sha256", "parent"},        # lineage of the round's weights
     "demos": "round_00/demos/store",
     "finetune": {"mode", "steps", "init", "sample_weights"},     # rounds >= 1 ("source_weights" before)
     "data": {"demos": counts, "rounds": {r: counts}, ...},        # what the round trained on
                                                                  # (+ "conflict_filter": kept/dropped,
                                                                  # "obs_range": steps outside the kept normalizer)
     "collection": {...},                                         # rounds >= 1: the collection summary
     "control": {"policy": {...}, "eval": {...}} | null,          # rounds >= 1
     "calibration": {...}, "eval": {...}, "eval_rewind": {...} | null,
     "operator_steps": {"demos", "round", "recovery", "total"}, "timings_s": {stage: s}}

Version 1 is the same layout without ``schema_version`` (records written before the version existed);
it loads unchanged. ``data`` and ``collection`` stay mappings: their keys depend on the recovery source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rewind.config import ConfigError

#: Version written into every new ``round.json``; 1: the layout before the version field.
SCHEMA_VERSION = 2


def _omit_none(obj: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``obj`` as a JSON dict (fields in order), leaving out the ``keys`` whose value is ``None``."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in keys and value is None:
            continue
        out[f.name] = value.to_json() if hasattr(value, "to_json") else value
    return out


def _build(cls: type, data: Any, where: str) -> Any:
    """``cls(**data)`` with a :class:`ConfigError` naming ``where`` for a missing or unknown key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping; got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


@dataclass
class PolicyRecord:
    """One policy's lineage: ``version`` (``<policy>/<16 hex>``), ``weights`` (relative to the loop's
    folder), the weights' ``sha256`` and the ``parent`` version (``None`` for the base)."""

    version: str
    weights: str
    sha256: str
    parent: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping."""
        return dataclasses.asdict(self)


@dataclass
class EvalOutcome:
    """A round's evaluation (``rewind-eval`` on the loop's seeds): success with its 95% Wilson interval,
    the stage histogram, and with test-time rewind the monitor's scalars."""

    episodes: int
    successes: int
    success_rate: float
    success_ci95: list[float]
    max_stage_histogram: dict[str, int]
    mean_length: float
    monitor: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping (``monitor`` only when set)."""
        return _omit_none(self, ("monitor",))


@dataclass
class CalibrationOutcome:
    """A round's monitor calibration: rollouts and successes, the alpha asked for, and either the
    calibration (``folder``, the ``alpha`` used, ``band``, ``n``, ``threshold``) or why there is none."""

    episodes: int
    successes: int
    alpha_requested: float
    calibrated: bool
    reason: str | None = None
    folder: str | None = None
    alpha: float | None = None
    band: bool | None = None
    n: int | None = None
    threshold: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping (unset fields left out)."""
        return _omit_none(self, ("reason", "folder", "alpha", "band", "n", "threshold"))


@dataclass
class OperatorSteps:
    """Operator steps: of the ``demos``, of this ``round``, of every recovery round so far and in all."""

    demos: int
    round: int
    recovery: int
    total: int

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping."""
        return dataclasses.asdict(self)


@dataclass
class PromotionOutcome:
    """The promotion gate's decision on a round's (or its control's) fine-tuned weights.

    ``candidate`` was fine-tuned this round; ``candidate_selection`` and ``deployed_selection`` are its
    and the previously deployed policy's success on the selection seeds; ``promoted`` says which one
    the round deploys. A rejected candidate is still evaluated on the evaluation seeds
    (``candidate_eval``), so the report shows what the gate kept out. With ``promotion.floor=base``,
    ``floor`` is ``"base"`` and ``base_selection`` the base policy's selection result the candidate
    was also held to.
    """

    rule: str
    tolerance: float
    promoted: bool
    candidate: PolicyRecord
    candidate_selection: EvalOutcome
    deployed_selection: EvalOutcome
    candidate_eval: EvalOutcome | None = None
    floor: str | None = None
    base_selection: EvalOutcome | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping (``candidate_eval``, ``floor`` and ``base_selection`` only when set)."""
        return _omit_none(self, ("candidate_eval", "floor", "base_selection"))

    @classmethod
    def from_json(cls, data: Any, where: str) -> PromotionOutcome:
        """Inverse of :meth:`to_json`."""
        out = _build(cls, data, where)
        out.candidate = _build(PolicyRecord, out.candidate, f"{where}.candidate")
        for key in ("candidate_selection", "deployed_selection", "candidate_eval", "base_selection"):
            if getattr(out, key) is not None:
                setattr(out, key, _build(EvalOutcome, getattr(out, key), f"{where}.{key}"))
        return out


@dataclass
class ControlRecord:
    """The control arm of a round: the same fine-tuning on the demos alone, evaluated."""

    policy: PolicyRecord
    eval: EvalOutcome
    selection: EvalOutcome | None = None
    promotion: PromotionOutcome | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON mapping (``selection`` and ``promotion`` only with a promotion gate)."""
        out = {"policy": self.policy.to_json(), "eval": self.eval.to_json()}
        if self.selection is not None:
            out["selection"] = self.selection.to_json()
        if self.promotion is not None:
            out["promotion"] = self.promotion.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> ControlRecord:
        """Inverse of :meth:`to_json`."""
        keys = set(data) if isinstance(data, dict) else set()
        if not isinstance(data, dict) or not {"policy", "eval"} <= keys <= {
            "policy",
            "eval",
            "selection",
            "promotion",
        }:
            raise ConfigError(
                f"{where}: expected the keys eval, policy (and selection, promotion); got {sorted(data) if isinstance(data, dict) else data!r}"
            )
        sel = data.get("selection")
        prom = data.get("promotion")
        return cls(
            _build(PolicyRecord, data["policy"], f"{where}.policy"),
            _build(EvalOutcome, data["eval"], f"{where}.eval"),
            None if sel is None else _build(EvalOutcome, sel, f"{where}.selection"),
            None if prom is None else PromotionOutcome.from_json(prom, f"{where}.promotion"),
        )


@dataclass
class WaitingForHuman:
    """A ``human`` round whose store a person has not filled yet: ``have`` of ``need`` episodes, and the
    ``rewind-teleop`` command that fills it."""

    have: int
    need: int
    command: str


@dataclass
class RoundRecord:
    """Everything a done round recorded (see the module docstring for the JSON layout)."""

    round: int
    policy: PolicyRecord
    demos: str
    data: dict[str, Any]
    calibration: CalibrationOutcome
    eval: EvalOutcome
    operator_steps: OperatorSteps
    eval_rewind: EvalOutcome | None = None
    finetune: dict[str, Any] | None = None
    collection: dict[str, Any] | None = None
    control: ControlRecord | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    selection: EvalOutcome | None = None
    promotion: PromotionOutcome | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The ``round.json`` mapping (the base round has no ``finetune``, ``collection``, ``control``)."""
        base = self.round == 0
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "round": self.round,
            "policy": self.policy.to_json(),
            "demos": self.demos,
        }
        if not base:
            out["finetune"] = self.finetune
        out["data"] = self.data
        if not base:
            out["collection"] = self.collection
            out["control"] = self.control.to_json() if self.control else None
        out["calibration"] = self.calibration.to_json()
        out["eval"] = self.eval.to_json()
        out["eval_rewind"] = self.eval_rewind.to_json() if self.eval_rewind else None
        out["operator_steps"] = self.operator_steps.to_json()
        out["timings_s"] = self.timings_s
        if self.selection is not None:
            out["selection"] = self.selection.to_json()
        if self.promotion is not None:
            out["promotion"] = self.promotion.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "round.json") -> RoundRecord:
        """Inverse of :meth:`to_json`; also reads version 1 (no ``schema_version``).

        Raises:
            ConfigError: a newer schema version, or a missing or unknown key (named with ``where``).
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping; got {type(data).__name__}")
        version = data.get("schema_version", 1)
        if version not in (1, SCHEMA_VERSION):
            raise ConfigError(
                f"{where}: schema_version {version} is not one this version reads (1, {SCHEMA_VERSION})"
            )
        d = {**data, "schema_version": SCHEMA_VERSION}
        rec = _build(cls, d, where)
        rec.policy = _build(PolicyRecord, rec.policy, f"{where}: policy")
        rec.calibration = _build(CalibrationOutcome, rec.calibration, f"{where}: calibration")
        rec.eval = _build(EvalOutcome, rec.eval, f"{where}: eval")
        rec.operator_steps = _build(OperatorSteps, rec.operator_steps, f"{where}: operator_steps")
        if rec.eval_rewind is not None:
            rec.eval_rewind = _build(EvalOutcome, rec.eval_rewind, f"{where}: eval_rewind")
        if rec.control is not None:
            rec.control = ControlRecord.from_json(rec.control, f"{where}: control")  # type: ignore[arg-type]
        if rec.selection is not None:
            rec.selection = _build(EvalOutcome, rec.selection, f"{where}: selection")
        if rec.promotion is not None:
            rec.promotion = PromotionOutcome.from_json(rec.promotion, f"{where}: promotion")
        return rec
