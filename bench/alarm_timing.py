"""When does the monitor alarm, and on which episodes? Per ``rewind-eval`` run made with a monitor and
no rewinds (``rewind.max_rewinds=0``: every alarm is logged, none changes the episode): episodes,
how many successes and failures alarm at all, where their first alarm fires (the latest rewind
checkpoint reached then: ``start`` means before the first one) and how many first alarms fire at the
first scored step (the first chunk comparison). A failure score that alarms at the start on successes
and failures alike calls the loop's operator in on episodes it cannot tell apart (docs/loop.md, "What
calls RaC's operator in on NutPeg").

    P=runs/base_ablation/nut_peg/baseline_s6000/train
    rewind-calibrate policy_path=$P env=nut_peg data_path=runs/base_ablation/nut_peg/store monitor=tide \
        monitor.alpha=0.2 episodes=100 seed=20000 max_demos=30 ddim_eta=1.0 out_dir=runs/s38/cal_const
    rewind-eval policy_path=$P env=nut_peg monitor=tide monitor.calibration=runs/s38/cal_const \
        rewind.max_rewinds=0 episodes=120 seed=30000 ddim_eta=1.0 out_dir=runs/s38/eval_alarm_const
    (the same with monitor.armed_from=checkpoint, out_dir=runs/s38/eval_alarm_const_armed; with
    monitor.band=true: runs/s38/eval_alarm_band; with monitor.per_segment=true: runs/s39/seg_alarm.sh)
    .venv/bin/python bench/alarm_timing.py start=runs/s38/eval_alarm_const \
        checkpoint=runs/s38/eval_alarm_const_armed band=runs/s38/eval_alarm_band \
        segment=runs/s39/eval_alarm_segment --out bench/results/alarm_timing_nut_peg.json
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from _commands import named_paths, write_result


def _events(record: dict[str, Any]) -> list[dict[str, Any]]:
    ev = record.get("events", [])
    return json.loads(ev) if isinstance(ev, str) else list(ev)


def run_alarms(folder: str) -> dict[str, Any]:
    """The counts of one ``rewind-eval`` run folder (its ``summary.json``); refuses a run without a
    monitor or one that rewound (its alarms would not be those of the plain rollouts)."""
    summary = json.loads((Path(folder) / "summary.json").read_text())
    if "monitor" not in summary:
        raise ValueError(f"{folder}: a rewind-eval run without a monitor")
    if any(r.get("rewinds", 0) for r in summary["records"]):
        raise ValueError(f"{folder}: episodes were rewound; run it with rewind.max_rewinds=0")
    first_step = int(summary["n_action_steps"])  # the first chunk comparison is scored at this step
    out: dict[str, Any] = {"episodes": len(summary["records"]), "policy_version": summary["policy_version"]}
    for outcome in ("success", "failure"):
        recs = [r for r in summary["records"] if bool(r["success"]) == (outcome == "success")]
        firsts = [a[0] for a in ([e for e in _events(r) if e["kind"] == "alarm"] for r in recs) if a]
        out[outcome] = {
            "episodes": len(recs),
            "alarmed": len(firsts),
            "first_alarm_at": dict(sorted(Counter(str(a.get("checkpoint")) for a in firsts).items())),
            "first_alarm_at_first_scored_step": sum(a["step"] == first_step for a in firsts),
        }
    s, f = out["success"], out["failure"]
    tpr = f["alarmed"] / f["episodes"] if f["episodes"] else float("nan")
    tnr = 1 - s["alarmed"] / s["episodes"] if s["episodes"] else float("nan")
    out["balanced_accuracy"] = (tpr + tnr) / 2
    return out


def _markdown(results: dict[str, dict[str, Any]]) -> str:
    """One row per run: alarmed successes and failures, where the first alarms fire, balanced accuracy."""
    lines = [
        "| run | successes alarmed | failures alarmed | first alarm at (successes; failures) "
        "| at the first scored step (s; f) | balanced accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        s, f = r["success"], r["failure"]
        where = "; ".join(
            ", ".join(f"{k} {v}" for k, v in x["first_alarm_at"].items()) or "-" for x in (s, f)
        )
        lines.append(
            f"| {name} | {s['alarmed']} / {s['episodes']} | {f['alarmed']} / {f['episodes']} | {where} "
            f"| {s['first_alarm_at_first_scored_step']}; {f['first_alarm_at_first_scored_step']} "
            f"| {r['balanced_accuracy']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Count per run; write JSON and Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "runs", nargs="+", help="NAME=EVAL_DIR (a rewind-eval out_dir with a monitor, no rewinds)"
    )
    ap.add_argument("--out", default="bench/results/alarm_timing.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        runs = named_paths(a.runs, "EVAL_DIR", "rewind-eval run")
        results = {name: run_alarms(path) for name, path in runs.items()}
    except ValueError as e:
        ap.error(str(e))
    write_result(Path(a.out), {"args": vars(a), "runs": results}, _markdown(results))


if __name__ == "__main__":
    main()
