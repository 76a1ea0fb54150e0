"""The promotion gate (``promotion.rule=not_worse``): a round's fine-tuned weights are deployed only
when they are not worse than the deployed policy on the selection seeds.

The selection seeds (``promotion.seed..``) serve nothing else, so the gate never sees the
evaluation seeds it is judged on. A rejected round keeps the deployed weights, its calibration and
its evaluation (the same weights on the same seeds give the same numbers); its data stays in the
pool, so a later round fine-tunes on it again together with more. The control arm passes the same
gate against its own deployed policy, so a comparison with the control measures the data, not the
gate. With ``promotion.floor=base`` a candidate must also be within the tolerance of the base
policy's (round 0's) selection success, so that tolerances do not add up over rounds.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rewind.loop import stages
from rewind.loop.config import LoopConfig, PromotionSettings
from rewind.loop.lineage import abs_path, round_dir
from rewind.loop.record import ControlRecord, EvalOutcome, PolicyRecord, PromotionOutcome, RoundRecord
from rewind.loop.stages import StageHook, timed

log = logging.getLogger(__name__)


def not_worse(
    candidate: EvalOutcome, deployed: EvalOutcome, tolerance: float, base: EvalOutcome | None = None
) -> bool:
    """The candidate's selection success is at least the deployed policy's minus ``tolerance``, and,
    when ``base`` is given (``promotion.floor=base``), at least the base policy's minus ``tolerance``."""
    references = [deployed] if base is None else [deployed, base]
    return all(candidate.success_rate >= ref.success_rate - tolerance - 1e-12 for ref in references)


def select(cfg: LoopConfig, weights: Path, folder: Path) -> EvalOutcome:
    """Success of ``weights`` on the selection seeds (``promotion.seed``, ``promotion.episodes``)."""
    p: PromotionSettings = cfg.promotion
    return stages.evaluate(cfg, weights, folder, seeds=(p.seed, p.episodes))


def judge(
    cfg: LoopConfig,
    candidate: PolicyRecord,
    weights: Path,
    deployed: EvalOutcome,
    folder: Path,
    what: str,
    base: EvalOutcome | None = None,
) -> PromotionOutcome:
    """Evaluate ``candidate`` (at ``weights``) on the selection seeds in ``folder/selection`` and decide
    against ``deployed`` (and ``base``, the base policy's selection result, when the floor is on).

    A rejected candidate is also evaluated on the evaluation seeds (``folder/candidate_eval``) for
    the report. ``what`` names the arm in the log ("round 2", "round 2 control").
    """
    p = cfg.promotion
    sel = select(cfg, weights, folder / "selection")
    ok = not_worse(sel, deployed, p.tolerance, base)
    floor = None if base is None else "base"
    out = PromotionOutcome(
        p.rule, p.tolerance, ok, candidate, sel, deployed, floor=floor, base_selection=base
    )
    if not ok:
        out.candidate_eval = stages.evaluate(cfg, weights, folder / "candidate_eval")
    log.info(
        "%s: candidate %s %.0f%% vs deployed %.0f%%%s on the selection seeds: %s",
        what,
        candidate.version,
        100 * sel.success_rate,
        100 * deployed.success_rate,
        "" if base is None else f" and base {100 * base.success_rate:.0f}%",
        "promoted" if ok else "rejected, kept the deployed weights",
    )
    return out


def judge_round(
    cfg: LoopConfig,
    out: Path,
    r: int,
    candidate: PolicyRecord,
    weights: Path,
    prev: RoundRecord | ControlRecord,
    folder: Path,
    arm: str,
    t: dict[str, float],
    hook: StageHook | None,
    base: RoundRecord,
) -> PromotionOutcome | None:
    """The promotion gate for round ``r``'s candidate of ``arm`` ("" or "control") against ``prev``'s
    deployed policy (and ``base``'s, round 0, with ``promotion.floor=base``), timed as
    ``[arm_]selection``; None when the gate is off. A policy without a recorded selection result (a
    loop started before the gate existed) is measured once, the deployed one into
    ``round_NN/deployed_selection``, the base into ``folder/base_selection``."""
    if not cfg.promotion.gated:
        return None
    with timed(t, f"{arm}_selection" if arm else "selection", hook, r):
        floor = None
        if cfg.promotion.floor == "base":
            floor = recorded_selection(cfg, out, base, folder / "base_selection")
        return judge(
            cfg,
            candidate,
            weights,
            deployed_selection(cfg, out, prev, round_dir(out, r)),
            folder,
            f"round {r} {arm}".rstrip(),
            floor,
        )


def recorded_selection(
    cfg: LoopConfig, out: Path, record: RoundRecord | ControlRecord, into: Path
) -> EvalOutcome:
    """``record``'s policy's success on the selection seeds: recorded when it was deployed, or (a loop
    started before the gate existed, or with ``promotion.rule=always``) measured now into ``into``
    and kept on ``record``."""
    if record.selection is None:
        record.selection = select(cfg, abs_path(out, record.policy.weights), into)
    return record.selection


def deployed_selection(
    cfg: LoopConfig, out: Path, prev: RoundRecord | ControlRecord, folder: Path
) -> EvalOutcome:
    """The deployed policy's success on the selection seeds (:func:`recorded_selection`), measured if
    need be into ``folder/deployed_selection``."""
    return recorded_selection(cfg, out, prev, folder / "deployed_selection")
