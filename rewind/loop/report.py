"""The loop's report: a Markdown file with matplotlib plots (regenerated after every round), the one
W&B run of the loop (per-round table, success-vs-operator-steps chart) and the command's summary."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rewind.loop.record import EvalOutcome, PromotionOutcome, RoundRecord, WaitingForHuman
from rewind.metrics import MetricsLogger
from rewind.utils.io import atomic_save_figure, atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

REPORT = "report.md"
PLOT_COST = "success_vs_operator_steps.png"
PLOT_ROUNDS = "success_by_round.png"
WANDB_MARKER = "wandb_logged.json"


def success_text(ev: EvalOutcome) -> str:
    """``62% [48%, 74%] (31/50)``."""
    lo, hi = ev.success_ci95
    return f"{ev.success_rate:.0%} [{lo:.0%}, {hi:.0%}] ({ev.successes}/{ev.episodes})"


def round_row(rec: RoundRecord) -> dict[str, Any]:
    """One flat row per round: policy version, data, operator steps, success with its interval."""
    ev, ops = rec.eval, rec.operator_steps
    coll = rec.collection or {}
    filt = (rec.data or {}).get("conflict_filter")
    lo, hi = ev.success_ci95
    return {
        "round": rec.round,
        "policy_version": rec.policy.version,
        "parent": rec.policy.parent,
        "episodes_collected": coll.get("episodes", 0),
        "episodes_kept": coll.get("kept", 0),
        "interventions": coll.get("interventions", 0),
        "source_counts": coll.get("source_counts", coll.get("labels", {})),  # "labels" before the rename
        "operator_steps_round": ops.round,
        "operator_steps_recovery": ops.recovery,
        "operator_steps_total": ops.total,
        "operator_steps_demos": ops.demos,
        "success_rate": ev.success_rate,
        "success_ci95_low": lo,
        "success_ci95_high": hi,
        "success_with_rewind": rec.eval_rewind.success_rate if rec.eval_rewind else None,
        "control_success": rec.control.eval.success_rate if rec.control else None,
        "alpha_used": rec.calibration.alpha,
        "threshold": rec.calibration.threshold,
        "promoted": rec.promotion.promoted if rec.promotion else None,
        "candidate_success": _rejected_success(rec.promotion),
        "control_promoted": rec.control.promotion.promoted if rec.control and rec.control.promotion else None,
        "control_candidate_success": _rejected_success(rec.control.promotion if rec.control else None),
        **({"conflict_kept": filt["kept"], "conflict_dropped": filt["dropped"]} if filt else {}),
    }


def _rejected_success(gate: PromotionOutcome | None) -> float | None:
    """A candidate the promotion gate rejected: its success on the evaluation seeds (else ``None``)."""
    return gate.candidate_eval.success_rate if gate and gate.candidate_eval else None


def _kept(rate: float | None) -> str:
    return "" if rate is None else f" (kept; rejected candidate {rate:.0%})"


def _plots(out: Path, rows: list[dict[str, Any]], title: str) -> list[Path]:
    """Success (95% Wilson interval) vs cumulative operator steps, and per round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = [r["success_rate"] for r in rows]
    err = [
        [v - r["success_ci95_low"] for v, r in zip(y, rows, strict=True)],
        [r["success_ci95_high"] - v for v, r in zip(y, rows, strict=True)],
    ]
    paths = []
    for name, x, xlabel in (
        (PLOT_COST, [r["operator_steps_total"] for r in rows], "operator steps (demos + recovery)"),
        (PLOT_ROUNDS, [r["round"] for r in rows], "round"),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label="policy")
        rw = [
            (xi, r["success_with_rewind"])
            for xi, r in zip(x, rows, strict=True)
            if r["success_with_rewind"] is not None
        ]
        if rw:
            ax.plot(*zip(*rw, strict=True), marker="s", ls="--", label="+ test-time rewind")
        # the control spends no operator steps beyond the demos: on the cost plot it sits at the demos' cost
        ctl = [
            (r["operator_steps_demos"] if name == PLOT_COST else xi, r["control_success"])
            for xi, r in zip(x, rows, strict=True)
            if r["control_success"] is not None
        ]
        if ctl:
            ax.plot(
                *zip(*ctl, strict=True),
                marker="^",
                ls="none" if name == PLOT_COST else "--",
                label="control: same training, demos only",
            )
        for xi, yi, r in zip(x, y, rows, strict=True):
            ax.annotate(f"r{r['round']}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set(xlabel=xlabel, ylabel="success rate (95% Wilson)", ylim=(0, 1.02), title=title)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        atomic_save_figure(out / name, fig)  # a full disk leaves the last round's plot
        plt.close(fig)
        paths.append(out / name)
    return paths


def write_report(out: Path, records: list[RoundRecord], cfg: Any) -> Path:
    """``report.md`` and its plots in ``out`` (overwritten after every round)."""
    rows = [round_row(r) for r in records]
    title = f"{cfg.env.name}: recovery={cfg.recovery.name}, finetune={cfg.finetune.mode}"
    _plots(out, rows, title)
    lines = [
        f"# rewind-loop report: {title}",
        "",
        "| round | policy version | kept episodes | interventions | operator steps (round / total) "
        "| success (95% Wilson) | with rewind | control: demos only |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rw = "" if r["success_with_rewind"] is None else f"{r['success_with_rewind']:.0%}"
        ctl = "" if r["control_success"] is None else f"{r['control_success']:.0%}"
        ctl += _kept(r["control_candidate_success"])
        lines.append(
            f"| {r['round']} | `{r['policy_version']}` | {r['episodes_kept']} | {r['interventions'] or 0} "
            f"| {r['operator_steps_round']} / {r['operator_steps_total']} | {r['success_rate']:.0%} "
            f"[{r['success_ci95_low']:.0%}, {r['success_ci95_high']:.0%}]{_kept(r['candidate_success'])} | {rw} | {ctl} |"
        )
    lines += ["", "Sources of the kept steps per round:", ""]
    lines += [f"* round {r['round']}: {r['source_counts']}" for r in rows if r["round"] > 0]
    lines += [
        f"* round {r['round']}, conflict filter: {r['conflict_kept']} steps kept, {r['conflict_dropped']} dropped"
        for r in rows
        if "conflict_dropped" in r
    ]
    lines += [
        "",
        f"![success vs operator steps]({PLOT_COST})",
        "",
        f"![success by round]({PLOT_ROUNDS})",
        "",
        "Each round's record (lineage, data, calibration, evaluation): `round_NN/round.json`.",
    ]
    return atomic_write_text(out / REPORT, "\n".join(lines) + "\n")


def log_to_wandb(out: Path, records: list[RoundRecord], cfg: Any) -> None:
    """The loop's one W&B run (and ``metrics.jsonl``): per-round scalars, the round table, the plots.
    Logged once the loop has run its rounds; a finished loop run again logs nothing new."""
    marker = out / WANDB_MARKER
    if marker.exists() and __import__("json").loads(marker.read_text()).get("rounds") == len(records):
        return
    import dataclasses

    rows = [round_row(r) for r in records]
    name = f"loop-{cfg.env.name}-{cfg.recovery.name}-{cfg.finetune.mode}-{out.name}"
    with MetricsLogger(
        out, cfg.wandb.project, cfg.wandb.mode, dataclasses.asdict(cfg), run_name=name, group=cfg.wandb.group
    ) as metrics:
        for r in rows:
            metrics.log(
                {f"loop/{k}": v for k, v in r.items() if isinstance(v, (int, float))}, step=r["round"]
            )
        metrics.log_table(
            "loop/rounds",
            [{k: str(v) if isinstance(v, dict) else v for k, v in r.items()} for r in rows],
            step=len(rows) - 1,
        )
        for path in (out / PLOT_COST, out / PLOT_ROUNDS):
            metrics.log_image(f"loop/{path.stem}", path, step=len(rows) - 1)
        metrics.summary(
            {
                "success_before": rows[0]["success_rate"],
                "success_after": rows[-1]["success_rate"],
                "operator_steps_recovery": rows[-1]["operator_steps_recovery"],
            }
        )
    atomic_write_json(marker, {"rounds": len(records)})


def summarize_loop(
    out: Path, records: list[RoundRecord], cfg: Any, waiting: WaitingForHuman | None
) -> dict[str, Any]:
    """The command's summary; logs success before and after with their intervals."""
    first, last = records[0], records[-1]
    log.info("rewind-loop %s recovery=%s finetune=%s:", cfg.env.name, cfg.recovery.name, cfg.finetune.mode)
    for rec in records:
        ops = rec.operator_steps
        log.info(
            "  round %d: success %s; operator steps %d this round, %d in all (demos %d)",
            rec.round,
            success_text(rec.eval),
            ops.round,
            ops.total,
            ops.demos,
        )
    log.info("success before %s -> after %s", success_text(first.eval), success_text(last.eval))
    control = last.control.eval if last.control else None
    if control:
        log.info("control (the same fine-tuning on the demos alone): %s", success_text(control))
    log.info("report: %s", out / REPORT)
    return {
        "status": "waiting_for_human" if waiting else "done",
        "rounds_done": len(records) - 1,
        "success_before": first.eval.success_rate,
        "success_before_ci95": first.eval.success_ci95,
        "success_after": last.eval.success_rate,
        "success_after_ci95": last.eval.success_ci95,
        "control_after": control.success_rate if control else None,
        "control_after_ci95": control.success_ci95 if control else None,
        "operator_steps_recovery": last.operator_steps.recovery,
        "operator_steps_demos": last.operator_steps.demos,
        "report": str(out / REPORT),
        "rounds": [round_row(r) for r in records],
        **({"next_command": waiting.command} if waiting else {}),
    }
