"""What finished loops' promotion gates would have deployed under another tolerance (exploratory).

Every gate decision of a loop is in its ``bench/loop_result.py`` record (each round's ``promotion``
and ``control_promotion``: the candidate's and the deployed policy's selection success, the base's
with ``promotion.floor=base``, and the candidate's evaluation even when it was rejected). Replaying
those decisions with :func:`rewind.loop.promotion.not_worse` at ``--tolerance`` gives the policy each
arm would have deployed after its last round, as long as the replay agrees with the real gate before
the last round: a different decision earlier would have changed what later rounds collected and
trained, so such an arm is reported as diverged and left out of the pool. Each deployed policy is
pooled over the loop's evaluation seeds and, with ``--heldout`` (``bench/heldout_eval.py`` files,
matched by policy version), the held-out seeds. Nothing is run; ``--tolerance`` at the loops' own
value reproduces what they deployed. (``bench/gate_floor.py`` replays the same records under the
base floor.)

    .venv/bin/python bench/gate_counterfactual.py bench/results/issue12_loop_nut_peg_rac_restore_failed_eta1_5seeds.json \\
        --tolerance 0 --heldout bench/results/heldout_nut_peg_rac_restore_failed_eta1_r1.json ... \\
        --out bench/results/gate_counterfactual_nut_peg.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result
from pool_arms import arm_record

from rewind.loop.promotion import not_worse
from rewind.loop.record import EvalOutcome, PromotionOutcome

log = logging.getLogger("bench")


def _runs(files: list[str]) -> list[dict[str, Any]]:
    """The loop runs of ``bench/loop_result.py`` files, in order; exits naming a file that is not one."""
    runs = []
    for f in files:
        data = json.loads(Path(f).read_text())
        if not isinstance(data.get("runs"), list):
            raise SystemExit(f"{f}: no 'runs' list: is it a bench/loop_result.py file?")
        runs += data["runs"]
    return runs


def _arm_history(run: dict[str, Any], arm: str, eval_episodes: int) -> list[dict[str, Any]]:
    """The base (``history[0]``), then per round the arm's candidate: version, selection result,
    evaluation ``[successes, episodes]``, whether the real gate promoted it, and the gate's floor."""
    rounds, key = run["rounds"], "promotion" if arm == "main" else "control_promotion"
    names = sorted(rounds)
    if names[:2] != ["round_00", "round_01"] or not rounds["round_01"].get("promotion"):
        raise SystemExit(f"{run['out_dir']}: no gated round 1: the loop ran without the promotion gate")
    first = PromotionOutcome.from_json(rounds["round_01"]["promotion"], f"{run['out_dir']} round_01")
    base = rounds["round_00"]
    history = [
        {
            "version": base["policy_version"],
            "selection": first.deployed_selection,
            "eval": [round(base["success"] * eval_episodes), eval_episodes],
        }
    ]
    for name in names[1:]:
        rnd = rounds[name]
        if not rnd.get(key):
            raise SystemExit(f"{run['out_dir']} {name}: no {arm} arm gate record (run with control=true)")
        gate = PromotionOutcome.from_json(rnd[key], f"{run['out_dir']} {name} {key}")
        if gate.promoted:  # the round's evaluation is the deployed policy's: the candidate's
            rate = rnd["success"] if arm == "main" else rnd["control_success"]
            ev = [round(rate * eval_episodes), eval_episodes]
        else:
            ev = [gate.candidate_eval.successes, gate.candidate_eval.episodes]
        history.append(
            {
                "version": gate.candidate.version,
                "selection": gate.candidate_selection,
                "eval": ev,
                "promoted": gate.promoted,
                "floor": gate.floor,
            }
        )
    return history


def replay(history: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """The gate replayed with ``tolerance`` over one arm's history: the deployed policy after the last
    round, the replayed decisions, and the first round whose decision differs from the real one before
    the last (``diverged``; then the deployed policy is unknown, ``None``)."""
    base = deployed = history[0]
    decisions = []
    for r, cand in enumerate(history[1:], start=1):
        floor: EvalOutcome | None = base["selection"] if cand["floor"] == "base" else None
        ok = not_worse(cand["selection"], deployed["selection"], tolerance, floor)
        decisions.append(ok)
        if ok != cand["promoted"] and r < len(history) - 1:
            return {"decisions": decisions, "diverged": r, "deployed": None}
        deployed = cand if ok else deployed
    return {"decisions": decisions, "diverged": None, "deployed": deployed}


def heldout_by_version(files: list[str]) -> dict[str, list[int]]:
    """Held-out successes and episodes by policy version; exits when one version has two results."""
    out: dict[str, list[int]] = {}
    for f in files:
        data = json.loads(Path(f).read_text())
        if not isinstance(data.get("results"), dict):
            raise SystemExit(f"{f}: no 'results' mapping: is it a bench/heldout_eval.py file?")
        for name, res in data["results"].items():
            s = res.get("summary") or {}
            if "policy_version" not in s:
                raise SystemExit(f"{f}: {name} has no summary.policy_version (rerun bench/heldout_eval.py)")
            k = [s["successes"], s["episodes"]]
            if out.setdefault(s["policy_version"], k) != k:
                raise SystemExit(f"{f}: {name} ({s['policy_version']}) differs from an earlier result: {k}")
    return out


def _pool(rows: list[dict[str, Any]], arm: str) -> dict[str, Any]:
    """An arm's successes summed over ``rows`` with the 95% Wilson interval (NaN when none)."""
    k, n = sum(r[arm]["successes"] for r in rows), sum(r[arm]["episodes"] for r in rows)
    return arm_record(k, n) if n else {"successes": 0, "episodes": 0, "success": float("nan"), "ci95": None}


def _arm_row(
    history: list[dict[str, Any]], tolerance: float, held: dict[str, list[int]], use_held: bool
) -> dict[str, Any]:
    """One arm's replayed decisions and, unless diverged, its deployed policy's successes."""
    rp = replay(history, tolerance)
    row = {
        "decisions": rp["decisions"],
        "real": [c["promoted"] for c in history[1:]],
        "diverged": rp["diverged"],
    }
    dep = rp["deployed"]
    if dep is not None:
        k, n = dep["eval"]
        if use_held:
            if dep["version"] not in held:
                raise SystemExit(f"no held-out result for {dep['version']}: pass the file that has it")
            k, n = k + held[dep["version"]][0], n + held[dep["version"]][1]
        row.update(version=dep["version"], successes=k, episodes=n)
    return row


def table(result: dict[str, Any]) -> str:
    """Markdown: per loop and arm the replayed decisions and the deployed success; the pool."""
    lines = [
        f"Gate replayed with tolerance {result['tolerance']} (exploratory)",
        "",
        "| loop | main: decisions (real) | main deployed | control: decisions (real) | control deployed |",
        "|---|---|---|---|---|",
    ]
    for row in result["loops"]:
        cells = []
        for arm in ("main", "control"):
            a = row[arm]
            dec = f"{a['decisions']} ({a['real']})"
            dep = (
                f"diverged at round {a['diverged']}"
                if a["diverged"]
                else f"{a['successes']} / {a['episodes']}"
            )
            cells += [dec, dep]
        lines.append(f"| {row['loop']} | " + " | ".join(cells) + " |")
    p = result["pooled"]
    m, c = p["main"], p["control"]
    lines += [
        "",
        f"Pooled over {p['loops']} loops: main {m['success']:.1%} ({m['successes']} / {m['episodes']}), "
        f"control {c['success']:.1%} ({c['successes']} / {c['episodes']}), {p['difference_points']:+.1f} points",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: loop result files in, the replay's JSON and Markdown out."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "loops", nargs="+", help="bench/loop_result.py files of gated loops run with control=true"
    )
    ap.add_argument("--tolerance", type=float, required=True, help="the gate tolerance to replay")
    ap.add_argument("--eval-episodes", type=int, default=100, help="the loops' eval.episodes")
    ap.add_argument("--heldout", nargs="*", default=[], help="bench/heldout_eval.py result files")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if not 0.0 <= a.tolerance <= 1.0:
        raise SystemExit(f"--tolerance must be in [0, 1]; got {a.tolerance}")
    held = heldout_by_version(a.heldout)
    rows = []
    for run in _runs(a.loops):
        row = {"loop": run["out_dir"], "rounds": len(run["rounds"]) - 1}
        for arm in ("main", "control"):
            history = _arm_history(run, arm, a.eval_episodes)
            row[arm] = _arm_row(history, a.tolerance, held, bool(a.heldout))
        rows.append(row)
    kept = [r for r in rows if not r["main"]["diverged"] and not r["control"]["diverged"]]
    pooled = {"loops": len(kept), "main": _pool(kept, "main"), "control": _pool(kept, "control")}
    pooled["difference_points"] = 100 * (pooled["main"]["success"] - pooled["control"]["success"])
    result = {"tolerance": a.tolerance, "heldout": a.heldout, "loops": rows, "pooled": pooled}
    write_result(Path(a.out), result, table(result))


if __name__ == "__main__":
    main()
