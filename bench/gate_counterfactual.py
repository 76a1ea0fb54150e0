"""What finished loops' promotion gates would have deployed under another tolerance (exploratory).

Every gate decision of a loop is recorded in its ``round_NN/round.json`` (the candidate's and the
deployed policy's selection success, the base's with ``promotion.floor=base``, and the candidate's
evaluation even when it was rejected), for the main arm and for the control arm. Replaying those
decisions with ``--tolerance`` gives the policy each arm would have deployed after its last round,
as long as the replay agrees with the real gate before the last round: a different decision earlier
would have changed what later rounds collected and trained, so such an arm is reported as diverged
and left out of the pool. Each deployed policy is pooled over the loop's evaluation seeds and, with
``--heldout`` (``bench/heldout_eval.py`` files, matched by policy version), the held-out seeds.
Nothing is run; ``--tolerance`` at the loops' own value reproduces what they deployed.

    .venv/bin/python bench/gate_counterfactual.py runs/s37/np_rac_restore_failed_eta1_s0 \\
        runs/s37/np_rac_restore_failed_eta1_s1 --tolerance 0 \\
        --heldout bench/results/heldout_nut_peg_rac_restore_failed_eta1_r1.json ... \\
        --out bench/results/gate_counterfactual_nut_peg.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _commands import write_result

from rewind.utils.stats import wilson_interval

log = logging.getLogger("bench")


def _rounds(folder: Path) -> list[dict[str, Any]]:
    """The loop's round records in order (round 0 first); exits naming a missing or unfinished one."""
    files = sorted(folder.glob("round_[0-9][0-9]/round.json"))
    if not files:
        raise SystemExit(f"{folder}: no round_NN/round.json: is it a finished rewind-loop folder?")
    records = [json.loads(f.read_text()) for f in files]
    if [r["round"] for r in records] != list(range(len(records))):
        raise SystemExit(f"{folder}: rounds {[r['round'] for r in records]} are not 0..{len(records) - 1}")
    return records


def _policy(version: str, selection: dict, evaluation: dict) -> dict[str, Any]:
    return {
        "version": version,
        "selection": selection["success_rate"],
        "eval": [evaluation["successes"], evaluation["episodes"]],
    }


def _arm_history(records: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    """Per round >= 1, the arm's candidate (version, selection, evaluation), whether the real gate
    promoted it, and the base (round 0) as ``history[0]``."""
    base = records[0]
    if "selection" not in base:
        raise SystemExit("round 0 has no selection: the loop ran without the promotion gate")
    history = [_policy(base["policy"]["version"], base["selection"], base["eval"])]
    for rec in records[1:]:
        part = rec if arm == "main" else rec.get("control")
        if not part or "promotion" not in part:
            raise SystemExit(f"round {rec['round']}: no {arm} arm gate record")
        gate = part["promotion"]
        ev = part["eval"] if gate["promoted"] else gate["candidate_eval"]
        cand = _policy(gate["candidate"]["version"], gate["candidate_selection"], ev)
        cand.update(promoted=gate["promoted"], floor=gate.get("floor"), tolerance=gate["tolerance"])
        history.append(cand)
    return history


def replay(history: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """The gate replayed with ``tolerance`` over one arm's history: the deployed policy after the last
    round, the replayed decisions, and the first round whose decision differs from the real one before
    the last (``diverged``; then the deployed policy is unknown, ``None``)."""
    base = deployed = history[0]
    decisions = []
    for r, cand in enumerate(history[1:], start=1):
        refs = [deployed] + ([base] if cand["floor"] == "base" else [])
        ok = all(cand["selection"] >= ref["selection"] - tolerance - 1e-12 for ref in refs)
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
    k = sum(r[arm]["successes"] for r in rows)
    n = sum(r[arm]["episodes"] for r in rows)
    rate = k / n if n else float("nan")
    return {
        "successes": k,
        "episodes": n,
        "success": rate,
        "ci95": list(wilson_interval(k, n)) if n else None,
    }


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
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("loops", nargs="+", help="finished rewind-loop folders (control=true, gated)")
    ap.add_argument("--tolerance", type=float, required=True, help="the gate tolerance to replay")
    ap.add_argument("--heldout", nargs="*", default=[], help="bench/heldout_eval.py result files")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if not 0.0 <= a.tolerance <= 1.0:
        raise SystemExit(f"--tolerance must be in [0, 1]; got {a.tolerance}")
    held = heldout_by_version(a.heldout)
    rows = []
    for folder in a.loops:
        records = _rounds(Path(folder))
        row = {"loop": folder, "rounds": len(records) - 1}
        for arm in ("main", "control"):
            row[arm] = _arm_row(_arm_history(records, arm), a.tolerance, held, bool(a.heldout))
        rows.append(row)
    kept = [r for r in rows if not r["main"]["diverged"] and not r["control"]["diverged"]]
    pooled = {"loops": len(kept), "main": _pool(kept, "main"), "control": _pool(kept, "control")}
    pooled["difference_points"] = 100 * (pooled["main"]["success"] - pooled["control"]["success"])
    result = {"tolerance": a.tolerance, "heldout": a.heldout, "loops": rows, "pooled": pooled}
    write_result(Path(a.out), result, table(result))


if __name__ == "__main__":
    main()
