"""Where do a round's corrections start? Per correction segment: the rewind checkpoint the intervention
went back to (``none`` for sources that do not rewind, e.g. HG-DAgger) and the task stage at its first
step (the env's predicates on the stored physics state), counted per store.

A correction teaches the stage it starts in. On NutPeg a RaC drive back to ``after_align`` mostly
lands in the ``grasp`` stage (the nut is no longer held), so the round corrects grasps where the
policy failed at the alignment; a ``restore`` rewind lands in the checkpoint's own stage
(docs/loop.md, "Where RaC's corrections start on NutPeg").

    MUJOCO_GL=osmesa .venv/bin/python bench/correction_stages.py --task nut_peg \
        drive=runs/s37/np_rac_ep80_s0/round_01/collect/store \
        restore=runs/s37/np_rac_restore_eta1_s0/round_01/collect/store \
        --out bench/results/correction_stages_nut_peg.json
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _commands import named_paths, write_result

from rewind.envs.registry import make_env
from rewind.store import SOURCE_CODES, ReplayStore
from rewind.store.windows import episode_segments


def _runs(steps: np.ndarray) -> list[np.ndarray]:
    """Contiguous runs of sorted step indices."""
    if not len(steps):
        return []
    return np.split(steps, np.flatnonzero(np.diff(steps) > 1) + 1)


def store_stages(path: str, env: Any, label: str) -> dict[str, Any]:
    """Every ``label`` segment of the store outside undone segments: its rewind target, what called the
    operator in (the intervention's ``trigger``: ``alarm``, ``stall``, ...) and the stage at its first
    step; returns the counts (``segments``, ``steps``, ``by_start``, ``by_trigger``: segments and steps
    per ``trigger -> stage``, ``steps_by_stage``)."""
    names = [*env.stage_names, "done"]
    code = SOURCE_CODES[label]
    starts: Counter[str] = Counter()
    trig_segments: Counter[str] = Counter()
    trig_steps: Counter[str] = Counter()
    steps_by_stage: Counter[str] = Counter()
    n_seg = 0
    with ReplayStore.open(path) as store:
        for info in store.episodes():
            ep = store.load(info.id)
            events = info.extra.get("events", [])
            rewinds = [e.get("checkpoint", "?") for e in events if e["kind"] == "rewind"]
            triggers = [e.get("trigger", "?") for e in events if e["kind"] == "intervention"]
            j = 0
            for b, e, undone in episode_segments(len(ep.actions), info.extra, info.id):
                if undone:
                    continue
                for seg in _runs(b + np.flatnonzero(ep.sources[b:e] == code)):
                    env.set_physics_state(ep.states[seg[0]])
                    first = names[env.stage()]
                    target = rewinds[j] if j < len(rewinds) else "none"
                    starts[f"{target} -> {first}"] += 1
                    by = f"{triggers[j] if j < len(triggers) else 'none'} -> {first}"
                    trig_segments[by] += 1
                    trig_steps[by] += len(seg)
                    for t in seg:
                        env.set_physics_state(ep.states[t])
                        steps_by_stage[names[env.stage()]] += 1
                    n_seg, j = n_seg + 1, j + 1
    return {
        "segments": n_seg,
        "steps": int(sum(steps_by_stage.values())),
        "by_start": dict(sorted(starts.items())),
        "by_trigger": {k: {"segments": n, "steps": trig_steps[k]} for k, n in sorted(trig_segments.items())},
        "steps_by_stage": {s: steps_by_stage[s] for s in names if steps_by_stage[s]},
    }


def _markdown(results: dict[str, dict[str, Any]]) -> str:
    """One row per store and (rewind target -> first stage), then per (trigger -> first stage)."""
    lines = ["| store | rewound to -> stage at the first correction step | segments |", "|---|---|---|"]
    for name, r in results.items():
        lines += [f"| {name} | {k} | {v} |" for k, v in r["by_start"].items()]
        by = r.get("by_trigger", {}).items()
        lines += [f"| {name} | trigger {k} ({v['steps']} steps) | {v['segments']} |" for k, v in by]
        per = ", ".join(f"{s} {n}" for s, n in r["steps_by_stage"].items())
        lines.append(f"| {name} | all ({r['steps']} steps: {per}) | {r['segments']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Count per store; write JSON and Markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", help="NAME=STORE_PATH (a round's collect/store)")
    ap.add_argument("--task", default="nut_peg")
    ap.add_argument("--label", default="correction", choices=list(SOURCE_CODES))
    ap.add_argument("--out", default="bench/results/correction_stages.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        stores = named_paths(a.stores, "STORE_PATH", "store")
    except ValueError as e:
        ap.error(str(e))
    env = make_env(a.task).unwrapped
    results = {name: store_stages(path, env, a.label) for name, path in stores.items()}
    write_result(Path(a.out), {"args": vars(a), "stores": results}, _markdown(results))


if __name__ == "__main__":
    main()
