"""Two evaluations of the same seeds compared seed by seed: which episodes only one of them solved.

For pairs of run folders (``rewind-eval`` outputs with a ``summary.json`` over the same seeds), e.g. a
control and a treatment that differ in one setting, it counts the successes of each, the seeds only
the treatment solved (``fixed``) and only the control solved (``broken``), and the two-sided exact
sign test of fixed against broken (the discordant pairs; McNemar's exact test). With several pairs
(e.g. one per training seed) it also pools them: the episodes, successes and discordant pairs summed,
and one sign test over the pooled discordant pairs. That test counts every discordant pair as
independent, which pairs over the same seeds are not (a nominal and a nudged pair run the same
episodes with the same noise, and mostly agree). So the pooled result also holds a test by seed:
each seed's net change summed over the pairs that ran it, and the exact two-sided sign-flip test of
that sum (the treatment's label swapped per seed, in every pair at once). With no seed in two pairs
it is the sign test itself; with shared seeds it is the one to quote:

    .venv/bin/python bench/paired_runs.py \\
        runs/s20/rw_persist_mr10_bt1_s70000/stack3/restore_nudge:runs/s21/rw_progress0.02_mr10_bt1_s70000/stack3/restore_nudge \\
        --out bench/results/paired_watchdog.json

A side may also be a run kept only in a committed ``bench/monitor_results.py`` JSON, written
``RESULT.json#TASK/NAME`` (its row for ``TASK``, the run ``NAME``, e.g. ``restore_nudge``), so a run
folder that is gone (``runs/`` is not committed) can still be paired with a new one:

    .venv/bin/python bench/paired_runs.py \
        bench/results/monitor_results_stack3_h8_d100_cal300_mr20_bt1_persist_progress0.02_seeds70000.json#stack3/restore_nudge:runs/s33/rw/stack3/restore_nudge \
        --out bench/results/paired.json

Nothing is run; the numbers are the records' own. Pairs over different seeds are refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from _commands import write_result
from monitor_results import fixed_broken, seed_changes

log = logging.getLogger("bench")


def sign_test(fixed: int, broken: int) -> float:
    """Two-sided exact sign test p-value of ``fixed`` against ``broken`` discordant pairs."""
    n = fixed + broken
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(fixed, broken) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _summary(run: Path) -> dict[str, Any]:
    """The run's ``summary.json``, or the run ``NAME`` of ``TASK`` in ``RESULT.json#TASK/NAME``."""
    if "#" in str(run):
        path, summary = str(run), _result_summary(*str(run).split("#", 1))
    else:
        path = run / "summary.json"
        if not path.is_file():
            raise SystemExit(f"{run}: no summary.json (a rewind-eval run folder?)")
        summary = json.loads(path.read_text())
    if not summary.get("records"):
        raise SystemExit(f"{path}: no per-episode records")
    return summary


def _result_summary(file: str, key: str) -> dict[str, Any]:
    """The run ``NAME`` of task ``TASK`` (``key`` = ``TASK/NAME``) in a monitor_results JSON ``file``
    (its per-episode records are checked by :func:`_summary`, as for a run folder)."""
    task, _, name = key.partition("/")
    try:
        rows = json.loads(Path(file).read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{file}: not a bench/monitor_results.py result ({exc})") from None
    by_task = {row.get("task"): row.get("success") or {} for row in rows}
    if task not in by_task:
        raise SystemExit(f"{file}: no task '{task}' (tasks: {', '.join(map(str, by_task))})")
    if not by_task[task].get(name):
        raise SystemExit(f"{file}#{key}: no run '{name}' (runs: {', '.join(by_task[task])})")
    return by_task[task][name]


def load_pair(control: Path, treatment: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two runs' summaries, checked to cover the same seeds."""
    a, b = _summary(control), _summary(treatment)
    if {r["seed"] for r in a["records"]} != {r["seed"] for r in b["records"]}:
        raise SystemExit(f"{control} and {treatment} ran different seeds: not a paired comparison")
    return a, b


def compare(control: Path, treatment: Path, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Seed-by-seed comparison of the two runs' summaries ``a`` and ``b`` (from :func:`load_pair`)."""
    fixed, broken = fixed_broken(a, b)
    return {
        "control": str(control),
        "treatment": str(treatment),
        "episodes": len(a["records"]),
        "control_successes": sum(bool(r["success"]) for r in a["records"]),
        "treatment_successes": sum(bool(r["success"]) for r in b["records"]),
        "fixed": fixed,
        "broken": broken,
        "sign_test_p": sign_test(fixed, broken),
    }


def sign_flip_test(changes: list[int]) -> float:
    """Exact two-sided p-value of ``sum(changes)`` under random signs: each seed's net change (its
    treatment successes minus its control successes over the pairs that ran it) is equally likely to
    have either sign under the null. With every change in {-1, 0, 1} it equals :func:`sign_test`."""
    sizes = [abs(int(c)) for c in changes if c]
    total = sum(sizes)
    dist = np.zeros(2 * total + 1)  # dist[total + v]: P(sum of signed sizes = v)
    dist[total] = 1.0
    for k in sizes:
        dist = 0.5 * (np.roll(dist, k) + np.roll(dist, -k))  # no wrap: |partial sums| <= total
    observed = abs(sum(int(c) for c in changes))
    values = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, dist[values >= observed].sum()))


def by_seed(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The test by seed over ``(control, treatment)`` summaries: seeds run by more than one pair,
    seeds with a net change, the net change summed, and :func:`sign_flip_test`."""
    net: dict[int, int] = {}
    runs: dict[int, int] = {}
    for a, b in pairs:
        for s, change in seed_changes(a, b).items():
            net[s] = net.get(s, 0) + change
            runs[s] = runs.get(s, 0) + 1
    changes = list(net.values())
    return {
        "shared_seeds": sum(1 for n in runs.values() if n > 1),
        "seeds_changed": sum(1 for c in changes if c),
        "net_change": sum(changes),
        "sign_flip_p": sign_flip_test(changes),
    }


def pooled(rows: list[dict[str, Any]], pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The pairs summed (episodes, each side's successes, fixed, broken, the sign test over them) and
    the test by seed (:func:`by_seed`) of the ``(control, treatment)`` summaries."""
    keys = ("episodes", "control_successes", "treatment_successes", "fixed", "broken")
    total = {k: sum(r[k] for r in rows) for k in keys}
    out = {"pairs": len(rows), **total, "sign_test_p": sign_test(total["fixed"], total["broken"])}
    return {**out, "by_seed": by_seed(pairs)}


def _log_counts(label: str, r: dict[str, Any]) -> None:
    """One line: ``label``, both sides' successes, the discordant pairs and the sign test."""
    log.info(
        "%s: %d -> %d of %d, fixed %d, broken %d, p = %.3g",
        label,
        r["control_successes"],
        r["treatment_successes"],
        r["episodes"],
        r["fixed"],
        r["broken"],
        r["sign_test_p"],
    )


def main() -> None:
    """Parse ``CONTROL:TREATMENT`` pairs, compare, log and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="CONTROL_RUN:TREATMENT_RUN folder pairs")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows, summaries = [], []
    for pair in args.pairs:
        if pair.count(":") != 1:
            raise SystemExit(f"'{pair}': expected CONTROL_RUN:TREATMENT_RUN")
        control, treatment = map(Path, pair.split(":"))
        summaries.append(load_pair(control, treatment))
        rows.append(compare(control, treatment, *summaries[-1]))
    for r in rows:
        _log_counts(f"{r['control']} -> {r['treatment']}", r)
    result: dict[str, Any] = {"pairs": rows}
    if len(rows) > 1:
        result["pooled"] = pooled(rows, summaries)
        _log_counts(f"pooled over {len(rows)} pairs", result["pooled"])
        seeds = result["pooled"]["by_seed"]
        log.info(
            "by seed (%d seeds in more than one pair): net %+d over %d seeds changed, p = %.3g",
            seeds["shared_seeds"],
            seeds["net_change"],
            seeds["seeds_changed"],
            seeds["sign_flip_p"],
        )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
