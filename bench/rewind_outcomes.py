"""How a monitored evaluation's failures ended: all rewinds spent, or a last attempt without an alarm.

For each ``rewind-eval ... monitor=...`` run folder (its ``summary.json``), every failed episode is
counted by how it ended and by the furthest stage it reached:

* ``spent``: it used the whole rewind budget (``rewind.max_rewinds``), so later alarms were logged only;
* ``no_alarm_last_attempt``: budget left, but the attempt after its last rewind (or the whole episode
  when it never rewound) raised no alarm, e.g. it ran out of time without the score rising;
* ``alarm_unused``: budget left and an alarm after the last rewind that did not rewind (should not happen
  with automatic rewinds; counted so that it would show).

``alarms`` counts every episode's alarms by what raised them: ``score`` (the failure score) or
``progress`` (the progress watchdog, ``monitor.progress_alpha``); ``alarmed_episodes`` counts the
successful and the failed episodes with at least one alarm of each kind (with rewinds off: the
false-alarm and detection rates).

    .venv/bin/python bench/rewind_outcomes.py runs/s20/rw_persist_mr10_bt1_s70000/stack3/restore_nudge \\
        --out bench/results/rewind_outcomes_stack3_persist_mr10_bt1.json

Nothing is run; the numbers are the records' own.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result

log = logging.getLogger("bench")


def ending(record: dict[str, Any], max_rewinds: int) -> str:
    """How one failed episode ended (see the module docstring)."""
    if record["rewinds"] >= max_rewinds:
        return "spent"
    events = record["events"]
    last = max((i for i, e in enumerate(events) if e["kind"] == "rewind"), default=-1)
    return (
        "alarm_unused" if any(e["kind"] == "alarm" for e in events[last + 1 :]) else "no_alarm_last_attempt"
    )


def outcomes(run: Path) -> dict[str, Any]:
    """The failures of one run folder, by ending and by furthest stage."""
    path = run / "summary.json"
    if not path.is_file():
        raise SystemExit(f"{run}: no summary.json (a rewind-eval run folder with a monitor?)")
    summary = json.loads(path.read_text())
    rewind = (summary.get("monitor") or {}).get("rewind")
    if not rewind or "records" not in summary:
        raise SystemExit(f"{path}: no monitor's rewind settings or records: not a monitored evaluation")
    names = [*summary["stage_names"], "done"]
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    reasons: collections.Counter = collections.Counter()  # the score's alarms, the progress watchdog's
    alarmed: dict[str, collections.Counter] = {
        "success": collections.Counter(),
        "failure": collections.Counter(),
    }
    for rec in summary["records"]:
        why = [e.get("reason", "score") for e in rec["events"] if e["kind"] == "alarm"]
        reasons.update(why)
        alarmed["success" if rec["success"] else "failure"].update(set(why))
        if not rec["success"]:
            table[ending(rec, int(rewind["max_rewinds"]))][names[rec["max_stage"]]] += 1
    failures = sum(sum(c.values()) for c in table.values())
    return {
        "run": str(run),
        "episodes": len(summary["records"]),
        "failures": failures,
        "max_rewinds": rewind["max_rewinds"],
        "endings": {k: dict(v) for k, v in sorted(table.items())},
        "alarms": dict(sorted(reasons.items())),
        "alarmed_episodes": {k: dict(sorted(v.items())) for k, v in alarmed.items()},
    }


def main() -> None:
    """Parse the arguments, count, log and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="rewind-eval run folders (with a monitor)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = [outcomes(r) for r in args.runs]
    for row in rows:
        log.info("%s: %d failures of %d; %s", row["run"], row["failures"], row["episodes"], row["endings"])
    write_result(args.out, {"runs": rows})


if __name__ == "__main__":
    main()
