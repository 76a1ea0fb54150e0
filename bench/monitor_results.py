"""Issue-4 results: Rewind-IL's two tables for our tasks, from the committed commands only.

For each ``task=RUN`` item (``RUN`` holds the base policy's ``store/`` and ``train/``, e.g. a run
folder of ``bench/base_policies.py``) it runs, each into its own folder under ``--root/<task>``:

    rewind-calibrate policy_path=RUN/train env=TASK data_path=RUN/store monitor=tide out_dir=.../cal
    rewind-eval policy_path=RUN/train env=TASK episodes=N seed=SEED perturb=P out_dir=.../base_P
    rewind-eval ... monitor=tide monitor.calibration=.../cal rewind=restore|drive out_dir=.../MODE_P
        (rewind.max_rewinds ``--max-rewinds``, rewind.backtrack_after ``--backtrack-after``; the
        modes run: ``--modes``, both by default)
    rewind-monitor-eval policy_path=RUN/train env=TASK data_path=RUN/store out_dir=.../detectors

with P in {none, nudge} and SEED ``--seed`` (10000), and writes ``--out`` (JSON) and ``--table``
(Markdown): (a) success of the base policy vs with rewind (restore, drive), nominal and perturbed,
with 95% Wilson intervals and the failure-rate reduction; (b) detectors compared (AUROC, balanced
accuracy, TPR, FPR, lead time, cost; ``--no-detectors`` skips it). Finished steps (a
``summary.json``) are reused, so an interrupted run resumes. ``--reuse-from OTHER_ROOT`` links each
step that another root finished with the same command (every path naming the same folder, the step's
own ``out_dir`` aside; :func:`_commands.reuse_step`) on unchanged policy weights,
e.g. the calibration and the runs with rewinds off when only ``--max-rewinds`` changes; the JSON
lists the linked steps under ``reused``.

    MUJOCO_GL=osmesa .venv/bin/python bench/monitor_results.py \
        stack3=runs/base_policies/stack3_d100_s10000 pick_place=runs/base_policies/pick_place_d100_s2500
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from _commands import reuse_step, rewind_bin, run_once  # noqa: E402  (bench/ is on sys.path)

from rewind.utils.io import atomic_write_text

log = logging.getLogger("monitor_results")
CONDITIONS = ("none", "nudge")
MODES = ("restore", "drive")  # the table columns, in this order


_bin = rewind_bin
NO_RUN = False  # --no-run: only gather the summaries that exist


def _run(cmd: list[str], folder: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """:func:`run_once` (``None`` for a missing step under ``--no-run``), after linking the step
    to ``--reuse-from``'s when that one ran the same command (:func:`reuse_step`)."""
    if args.reuse_from and reuse_step(cmd, folder, Path(args.root), Path(args.reuse_from)):
        args.reused.append(str(folder))
    return run_once(cmd, folder, no_run=NO_RUN)


def _seeded(summary: dict[str, Any] | None, folder: Path, seed: int) -> dict[str, Any] | None:
    """``summary``, checked to start at ``seed`` (a reused folder from another ``--seed`` is an error)."""
    recs = (summary or {}).get("records") or []
    if recs and recs[0]["seed"] != seed:
        raise SystemExit(
            f"{folder} holds episodes from seed {recs[0]['seed']}, not {seed}: use another --root"
        )
    return summary


def run_task(root: Path, task: str, run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """All commands of one task; returns its rows."""
    base = root / task
    common = [f"policy_path={run / 'train'}", f"env={task}", "progress=false", *args.overrides]
    nominal = [o for o in common if not o.startswith("perturb.")]  # calibration rollouts are unperturbed
    cal = _run(
        [
            _bin("rewind-calibrate"),
            *nominal,
            f"data_path={run / 'store'}",
            "monitor=tide",
            f"episodes={args.cal_episodes}",
            f"out_dir={base / 'cal'}",
        ],
        base / "cal",
        args,
    )
    success: dict[str, dict[str, Any]] = {}
    for cond in CONDITIONS:
        ev = [
            _bin("rewind-eval"),
            *common,
            f"episodes={args.episodes}",
            f"seed={args.seed}",
            f"perturb={cond}",
            "wandb.mode=offline",
        ]
        folder = base / f"base_{cond}"
        success[f"base_{cond}"] = _seeded(_run([*ev, f"out_dir={folder}"], folder, args), folder, args.seed)
        # (folder prefix, rewind mode, rewinds per episode)
        modes = [(m, m, args.max_rewinds) for m in args.modes]
        if args.paired:  # the monitored runner with rewinds off: the same noise streams, alarms logged only
            modes.append(("norewind", "restore", 0))
        for prefix, mode, budget in modes:
            name = f"{prefix}_{cond}"
            cmd = [
                *ev,
                "monitor=tide",
                f"monitor.calibration={base / 'cal'}",
                f"rewind={mode}",
                f"rewind.max_rewinds={budget}",
                *([f"rewind.backtrack_after={args.backtrack_after}"] if budget else []),
                f"out_dir={base / name}",
            ]
            success[name] = _seeded(_run(cmd, base / name, args), base / name, args.seed)
    if args.no_detectors:
        return {"task": task, "run": str(run), "calibration": cal, "success": success, "detectors": None}
    det = _run(
        [
            _bin("rewind-monitor-eval"),
            *common,
            f"data_path={run / 'store'}",
            f"cal_episodes={args.cal_episodes}",
            f"episodes={args.episodes}",
            f"monitor.num_samples={args.stac_samples}",
            f"out_dir={base / 'detectors'}",
        ],
        base / "detectors",
        args,
    )
    return {"task": task, "run": str(run), "calibration": cal, "success": success, "detectors": det}


def _cell(s: dict[str, Any]) -> str:
    lo, hi = s["success_ci95"]
    return f"{s['success_rate']:.0%} [{lo:.2f}, {hi:.2f}]"


def _cut(ref: dict[str, Any], run: dict[str, Any]) -> float:
    """The failure-rate reduction of ``run`` against ``ref`` (positive: fewer failures; nan if none)."""
    fb = 1 - ref["success_rate"]
    return (fb - (1 - run["success_rate"])) / fb if fb > 0 else float("nan")


def _cuts(cuts: list[float]) -> str:
    """``+12% / +0%``; ``-`` for a reference without failures (nothing to cut)."""
    return " / ".join("-" if c != c else f"{c:+.0%}" for c in cuts)


def seed_changes(ref: dict[str, Any], run: dict[str, Any]) -> dict[int, int]:
    """Seed -> ``run``'s success minus ``ref``'s (+1 fixed, -1 broken, 0 the same) for two run
    summaries with ``records`` over the same seeds (``bench/paired_runs.py`` uses it too)."""
    ok = {r["seed"]: bool(r["success"]) for r in ref["records"]}
    return {r["seed"]: int(bool(r["success"])) - int(ok[r["seed"]]) for r in run["records"]}


def fixed_broken(ref: dict[str, Any], run: dict[str, Any]) -> tuple[int, int]:
    """(fixed, broken): seeds that fail in ``ref`` and succeed in ``run``, and the reverse."""
    changes = seed_changes(ref, run).values()
    return sum(1 for c in changes if c > 0), sum(1 for c in changes if c < 0)


def _alarmed(ref: dict[str, Any]) -> str:
    """``a / f failures, b / s successes``: episodes of the rewinds-off run with at least one alarm."""
    recs = ref["records"]
    fail = [r for r in recs if not r["success"]]
    succ = [r for r in recs if r["success"]]
    k_f = sum(1 for r in fail if r.get("alarms", 0) > 0)
    k_s = sum(1 for r in succ if r.get("alarms", 0) > 0)
    return f"{k_f} / {len(fail)}, {k_s} / {len(succ)}"


def paired_table(rows: list[dict[str, Any]]) -> list[str]:
    """(a') With ``--paired``: rewind against the monitor with rewinds off, which runs the same noise
    streams, so each seed's episode is the same up to its first rewind; per seed, fixed / broken; and
    how many of the reference's failures and successes raised an alarm."""
    out = [
        "",
        "(a') Paired: the same monitored episodes with rewinds off (alarms logged only) as the reference",
        "",
        "| task | condition | no rewind | alarmed: failures, successes | + restore (fixed / broken) "
        "| + drive (fixed / broken) | failure cut (restore / drive) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["success"]
        for cond in CONDITIONS:
            ref = s.get(f"norewind_{cond}")
            if ref is None or all(s.get(f"{m}_{cond}") is None for m in MODES):
                continue
            cells, cuts = [], []
            for m in MODES:
                if s.get(f"{m}_{cond}") is None:  # --modes restore (or drive) alone
                    cells.append("-")
                    cuts.append(float("nan"))
                    continue
                fixed, broken = fixed_broken(ref, s[f"{m}_{cond}"])
                cells.append(f"{_cell(s[f'{m}_{cond}'])} ({fixed} / {broken})")
                cuts.append(_cut(ref, s[f"{m}_{cond}"]))
            out.append(
                f"| {r['task']} | {cond} | {_cell(ref)} | {_alarmed(ref)} | {cells[0]} | {cells[1]} | {_cuts(cuts)} |"
            )
    return out if len(out) > 5 else []


def tables(rows: list[dict[str, Any]], episodes: int = 50, seed: int = 10000) -> str:
    """Markdown tables (a) success (``episodes`` per cell from ``seed``) and (b) detectors."""
    out = [
        f"(a) Success ({episodes} episodes, seeds {seed}..; 95% Wilson interval) and failure-rate reduction",
        "",
        "| task | condition | base | + rewind (restore) | + rewind (drive) | failure cut (restore / drive) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for cond in CONDITIONS:
            s = r["success"]
            runs = [s.get(f"{m}_{cond}") for m in MODES]  # None for a mode not run (--modes)
            if s.get(f"base_{cond}") is None or all(x is None for x in runs):
                continue
            cuts = [float("nan") if x is None else _cut(s[f"base_{cond}"], x) for x in runs]
            cells = " | ".join("-" if x is None else _cell(x) for x in runs)
            out.append(f"| {r['task']} | {cond} | {_cell(s[f'base_{cond}'])} | {cells} | {_cuts(cuts)} |")
    out += paired_table(rows)
    if all(r["detectors"] is None for r in rows):
        return "\n".join(out)
    out += [
        "",
        "(b) Detectors (thresholds from nominal successful rollouts, alpha = 0.05)",
        "",
        "| task | condition | detector | AUROC | bal. acc. | TPR | FPR "
        "| median lead (steps) | cost (ms/step) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["detectors"]
        if d is None:
            continue
        for cond, per in d["results"].items():
            for name, m in per.items():
                if name.startswith("_"):
                    continue
                lead = m["lead_time_median"]
                out.append(
                    f"| {r['task']} | {cond} | {name} | {m['auroc']:.2f} | {m['balanced_accuracy']:.2f} | "
                    f"{m['tpr']:.2f} | {m['fpr']:.2f} | {'-' if lead is None else f'{lead:+.0f}'} | "
                    f"{d['cost_ms_per_step'][name]:.3f} |"
                )
    return "\n".join(out)


def main() -> None:
    """Run every task item; write the JSON and the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", nargs="+", help="task=RUN_FOLDER items")
    ap.add_argument("--root", default="runs/monitor_results")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=10000, help="first evaluation seed")
    ap.add_argument("--cal-episodes", type=int, default=60)
    ap.add_argument("--max-rewinds", type=int, default=3)
    ap.add_argument(
        "--backtrack-after",
        type=int,
        default=0,
        help="rewind.backtrack_after of the rewind runs (0: always the latest checkpoint)",
    )
    ap.add_argument(
        "--modes",
        nargs="+",
        choices=["restore", "drive"],
        default=["restore", "drive"],
        help="rewind modes to run (the tables show '-' for one left out)",
    )
    ap.add_argument("--stac-samples", type=int, default=32)
    ap.add_argument(
        "--overrides", nargs="*", default=[], help="extra overrides for every command (monitor.*)"
    )
    ap.add_argument("--out", default="bench/results/monitor_results.json")
    ap.add_argument("--table", default="bench/results/monitor_results.md")
    ap.add_argument("--no-run", action="store_true", help="only tabulate the summaries that already exist")
    ap.add_argument(
        "--reuse-from",
        metavar="ROOT",
        help="another --root: link each step it finished with the same command on unchanged weights "
        "(a calibration, the runs without rewinds) instead of running it again",
    )
    ap.add_argument("--no-detectors", action="store_true", help="skip (b), the detector comparison")
    ap.add_argument(
        "--paired",
        action="store_true",
        help="also run the monitor with rewinds off (norewind_P) and tabulate the paired effect per seed",
    )
    args = ap.parse_args()
    args.reused = []
    if args.backtrack_after < 0 or args.max_rewinds < 0:
        ap.error("--backtrack-after and --max-rewinds must be >= 0")
    global NO_RUN
    NO_RUN = args.no_run
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    rows = []
    for item in args.items:
        task, run = item.split("=", 1)
        rows.append(run_task(Path(args.root), task, Path(run), args))
        record = {"command": " ".join(sys.argv), "seed": args.seed, "rows": rows}
        if args.reuse_from:
            record["reused"] = {"from": args.reuse_from, "steps": args.reused}
        atomic_write_text(args.out, json.dumps(record, indent=1))
        atomic_write_text(args.table, tables(rows, args.episodes, args.seed) + "\n")
    print(tables(rows, args.episodes, args.seed))


if __name__ == "__main__":
    main()
