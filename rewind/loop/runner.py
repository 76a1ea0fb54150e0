"""``run_loop``: the base (round 0), then recovery rounds: collect under the monitor, store, fine-tune,
recalibrate, evaluate. Resumable at round granularity (:mod:`rewind.loop.lineage`)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from rewind.config import ConfigError
from rewind.envs.config import build_env
from rewind.loop import promotion, stages
from rewind.loop.batched_collect import collect_round
from rewind.loop.config import LoopConfig
from rewind.loop.control_arm import control_process, run_control_arm
from rewind.loop.episodes import CollectRules, summarize_outcomes
from rewind.loop.finetune_data import conflict_filter, finetune_config, finetune_record
from rewind.loop.lineage import (
    abs_path,
    check_identity,
    clear_unfinished,
    load_record,
    mark_done,
    policy_record,
    rel,
    round_dir,
)
from rewind.loop.record import (
    CalibrationOutcome,
    EvalOutcome,
    OperatorSteps,
    PolicyRecord,
    PromotionOutcome,
    RoundRecord,
    WaitingForHuman,
)
from rewind.loop.report import log_to_wandb, success_text, summarize_loop, write_report
from rewind.loop.sources import SourceContext, is_external, make_source, teleop_command
from rewind.loop.stages import StageHook, timed
from rewind.loop.stall import StallThreshold, loop_stall_threshold
from rewind.monitor.episode import RewindConfig
from rewind.monitor.factory import load_monitor
from rewind.policies.io import read_policy_meta
from rewind.rollout.workers import EnvFactory
from rewind.store import ReplayStore, store_spec_for
from rewind.train import DataConfig
from rewind.train.policy_api import load_policy, resolve_weights
from rewind.utils.device import resolve_device

log = logging.getLogger(__name__)


def _finish_round(
    cfg: LoopConfig, out: Path, r: int, weights: Path, demos: str, t: dict[str, float], hook: StageHook | None
) -> tuple[CalibrationOutcome, EvalOutcome, EvalOutcome | None]:
    """Calibrate and evaluate round ``r``'s weights (and with ``eval.rewind``, evaluate with rewind)."""
    folder = round_dir(out, r)
    with timed(t, "calibrate", hook, r):
        cal = stages.calibrate_policy(cfg, weights, demos, folder / "calibration")
    with timed(t, "eval", hook, r):
        ev = stages.evaluate(cfg, weights, folder / "eval")
    evr = None
    if cfg.eval.rewind and cal.calibrated:
        with timed(t, "eval_rewind", hook, r):
            evr = stages.evaluate(cfg, weights, folder / "eval_rewind", cal.folder)
    if cal.folder:
        cal.folder = rel(out, cal.folder)
    log.info("round %d: success %s", r, success_text(ev))
    return cal, ev, evr


def base_round(cfg: LoopConfig, out: Path, hook: StageHook | None = None) -> RoundRecord:
    """Round 0: the base policy (built from scripted demos unless ``base.policy_path``), calibrated and
    evaluated."""
    done = load_record(out, 0)
    if done is not None:
        return done
    folder, t = clear_unfinished(out, 0), {}
    b = cfg.base
    if b.policy_path:
        weights = resolve_weights(b.policy_path)
        demos = b.demos_path or read_policy_meta(weights)["extra"].get("store")
        if not demos:
            raise ConfigError(f"base.demos_path: the weights {weights} do not name their demo store; set it")
    else:
        with timed(t, "demos", hook, 0):
            stages.collect_demos(cfg, folder / "demos")
        demos = str(folder / "demos" / "store")
        tcfg = stages.train_config(
            cfg,
            folder / "train",
            DataConfig(path=demos, val_fraction=0.0),
            b.policy,
            cfg.seed,
            stages.optim_config(b.steps, b.batch_size, b.lr, b.warmup_steps),
        )
        with timed(t, "train", hook, 0):
            stages.train(tcfg)
        weights = resolve_weights(str(folder / "train"))
    demo_counts = stages.store_counts(demos)
    policy = policy_record(out, weights, None)
    cal, ev, evr = _finish_round(cfg, out, 0, weights, demos, t, hook)
    n_demo = demo_counts["operator_steps"]
    record = RoundRecord(
        round=0,
        policy=policy,
        demos=rel(out, demos),
        calibration=cal,
        eval=ev,
        eval_rewind=evr,
        data={"demos": {k: v for k, v in demo_counts.items() if k != "episode_ids"}, "rounds": {}},
        operator_steps=OperatorSteps(demos=n_demo, round=0, recovery=0, total=n_demo),
        timings_s=t,
    )
    if cfg.promotion.gated:
        with timed(t, "selection", hook, 0):
            record.selection = promotion.select(cfg, weights, folder / "selection")
    mark_done(out, 0, record)
    return record


def _collect(
    cfg: LoopConfig, out: Path, r: int, prev: RoundRecord, stall: StallThreshold | None = None
) -> dict[str, Any] | WaitingForHuman:
    """Round ``r``'s episodes under the previous round's policy and monitor, into ``collect/store``;
    ``stall`` (``recovery.stall_from_demos``) replaces ``recovery.stall_steps``."""
    folder = round_dir(out, r) / "collect"
    store_path, weights = folder / "store", abs_path(out, prev.policy.weights)
    cal = prev.calibration
    cal_folder = str(abs_path(out, cal.folder)) if cal.calibrated and cal.folder else None
    seed0 = cfg.collect_seed + (r - 1) * cfg.episodes_per_round
    if is_external(cfg.recovery):
        return _external(cfg, r, store_path, weights, cal_folder, seed0)
    env = build_env(cfg.env)
    try:
        loaded = load_policy(
            str(weights), env, cfg.env.name, resolve_device(cfg.device), ddim_eta=cfg.ddim_eta
        )
        mcfg = dataclasses.replace(cfg.monitor, calibration=cal_folder) if cal_folder else None
        monitor, tracker, _ = (
            load_monitor(mcfg, loaded.policy, loaded.weights_hash) if mcfg else (None, None, {})
        )
        source = make_source(cfg.recovery, cfg.env.name)
        ctx = SourceContext(
            env, loaded, str(abs_path(out, prev.demos or "")), folder, r, cfg.progress, cfg.seed
        )
        prepared = source.prepare(ctx)
        rw = RewindConfig(mode=cfg.recovery.rewind_mode, max_rewinds=10**6, auto_rewind=False)
        rc, seeds = cfg.recovery, range(seed0, seed0 + cfg.episodes_per_round)
        stall_steps = stall.stall_steps if stall else rc.stall_steps
        rules = CollectRules(rc.keep, rc.pre_intervention_steps, rc.max_interventions, stall_steps)
        with ReplayStore.open_or_create(store_path, store_spec_for(env)) as store:
            outcomes = collect_round(
                env,
                EnvFactory(cfg.env),
                cfg.rollout,
                loaded.policy,
                monitor,
                tracker,
                rw,
                source,
                seeds,
                store,
                rules,
                loaded.version,
                r,
                cfg.progress,
            )
    finally:
        env.close()
    summary = {**summarize_outcomes(outcomes), "source": {**prepared, **source.report()}}
    summary["stall_steps"] = stall_steps
    if stall:
        summary["stall_from_demos"] = stall.to_json()
    stages.atomic_write_json(folder / "summary.json", summary)
    return {k: v for k, v in summary.items() if k != "per_episode"}


def _external(
    cfg: LoopConfig, r: int, store: Path, weights: Path, cal: str | None, seed0: int
) -> dict[str, Any] | WaitingForHuman:
    """A ``human`` round filled by ``rewind-teleop``: its counts, or what to run when it is not full yet."""
    have = stages.store_counts(store)["episodes"] if store.exists() else 0
    if have < cfg.episodes_per_round:
        cmd = teleop_command(
            cfg.env.name,
            str(weights),
            cal,
            str(store),
            r,
            seed0 + have,
            cfg.episodes_per_round - have,
            cfg.recovery.rewind_mode,
        )
        return WaitingForHuman(have=have, need=cfg.episodes_per_round, command=cmd)
    counts = stages.store_counts(store)
    with ReplayStore.open(store) as s:
        ok = sum(bool(i.success) for i in s.episodes())
    return {
        "episodes": counts["episodes"],
        "success_rate": ok / max(counts["episodes"], 1),
        "kept": counts["episodes"],
        "kept_steps": counts["steps"],
        "operator_steps": counts["operator_steps"],
        "source_counts": counts["source_counts"],
        "episode_ids": counts["episode_ids"],
        "interventions": None,
    }


@dataclasses.dataclass(frozen=True)
class Deployment:
    """What a round deploys after its promotion gate: the policy with its calibration and evaluations
    (the previous round's when the candidate is rejected), the candidate's selection result and the
    gate's verdict (``None`` with the gate off)."""

    policy: PolicyRecord
    calibration: CalibrationOutcome
    eval: EvalOutcome
    eval_rewind: EvalOutcome | None
    selection: EvalOutcome | None
    promotion: PromotionOutcome | None


def _deploy(
    cfg: LoopConfig,
    out: Path,
    r: int,
    records: list[RoundRecord],
    t: dict[str, float],
    hook: StageHook | None,
) -> Deployment:
    """Round ``r``'s fine-tuned weights through the promotion gate: deployed, they are calibrated and
    evaluated; rejected, the previous round's policy, calibration and evaluation stay."""
    prev = records[-1]
    weights = resolve_weights(str(round_dir(out, r) / "train"))
    policy = policy_record(out, weights, prev.policy.version)
    gate = promotion.judge_round(
        cfg, out, r, policy, weights, prev, round_dir(out, r), "", t, hook, base=records[0]
    )
    if gate is not None and not gate.promoted:
        return Deployment(prev.policy, prev.calibration, prev.eval, prev.eval_rewind, prev.selection, gate)
    demos = str(abs_path(out, records[0].demos))
    cal, ev, evr = _finish_round(cfg, out, r, weights, demos, t, hook)
    return Deployment(policy, cal, ev, evr, gate.candidate_selection if gate else None, gate)


def recovery_round(
    cfg: LoopConfig,
    out: Path,
    r: int,
    records: list[RoundRecord],
    hook: StageHook | None = None,
    stall: StallThreshold | None = None,
) -> RoundRecord | WaitingForHuman:
    """Round ``r >= 1``: collect (with ``stall``'s threshold when given), fine-tune, calibrate, evaluate;
    returns its record, or what a person still has to supply (:class:`WaitingForHuman`)."""
    prev, t = records[-1], {}
    clear_unfinished(out, r, keep=("collect",) if is_external(cfg.recovery) else ())
    arm, control = control_process(cfg, out, r, records), None
    try:
        with timed(t, "collect", hook, r):
            coll = _collect(cfg, out, r, prev, stall)
        if isinstance(coll, WaitingForHuman):
            return coll
        filt = conflict_filter(cfg, out, r, records, t, hook)
        tcfg, init, data = finetune_config(cfg, out, r, records, round_dir(out, r) / "train", filt=filt)
        with timed(t, "finetune", hook, r):
            stages.train(tcfg)
        if cfg.control and arm is None:
            control = run_control_arm(cfg, out, r, records, t, hook)
        dep = _deploy(cfg, out, r, records, t, hook)
        if arm is not None:  # its process ran beside everything above
            control = arm.result(t)
    finally:
        if arm is not None:
            arm.stop()
    spent = int(coll["operator_steps"] or 0)
    ops = prev.operator_steps
    record = RoundRecord(
        round=r,
        policy=dep.policy,
        demos=records[0].demos,
        finetune=finetune_record(cfg, out, init),
        data=data,
        collection=coll,
        control=control,
        calibration=dep.calibration,
        eval=dep.eval,
        eval_rewind=dep.eval_rewind,
        timings_s=t,
        selection=dep.selection,
        promotion=dep.promotion,
        operator_steps=OperatorSteps(
            demos=ops.demos, round=spent, recovery=ops.recovery + spent, total=ops.total + spent
        ),
    )
    mark_done(out, r, record)
    return record


def demo_stall(cfg: LoopConfig, out: Path, base: RoundRecord) -> StallThreshold | None:
    """``recovery.stall_from_demos``: the stall threshold from the base's demos, once per loop (a resumed
    loop reads ``stall.json``), logged; ``None`` when it is off (``stall_from_demos`` null or
    ``stall_steps=0``) or no round collects here."""
    rc = cfg.recovery
    if rc.stall_from_demos is None or rc.stall_steps == 0 or cfg.rounds < 1 or is_external(rc):
        return None
    stall = loop_stall_threshold(
        out, abs_path(out, base.demos), cfg.env, rc.stall_from_demos, rc.stall_percentile
    )
    log.info("recovery.stall_from_demos: %s", stall.describe())
    return stall


def run_loop(cfg: LoopConfig, hook: StageHook | None = None) -> dict[str, Any]:
    """Entry point of ``rewind-loop``; returns the summary (success before and after, per round)."""
    out = Path(cfg.out_dir)
    if check_identity(out, cfg):
        log.info("resuming the loop in %s", out)
    threads = torch.get_num_threads()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    waiting, stall = None, None
    try:
        records = [base_round(cfg, out, hook)]
        write_report(out, records, cfg)
        stall = demo_stall(cfg, out, records[0])
        for r in range(1, cfg.rounds + 1):
            rec = load_record(out, r) or recovery_round(cfg, out, r, records, hook, stall)
            if isinstance(rec, WaitingForHuman):
                waiting = rec
                log.warning(
                    "round %d needs %d more human episodes: run\n  %s\n"
                    "then run this rewind-loop command again",
                    r,
                    rec.need - rec.have,
                    rec.command,
                )
                break
            records.append(rec)
            write_report(out, records, cfg)
    finally:
        torch.set_num_threads(threads)
    if waiting is None:
        log_to_wandb(out, records, cfg)
    summary = summarize_loop(out, records, cfg, waiting)
    return {**summary, "stall_from_demos": stall.to_json()} if stall else summary
