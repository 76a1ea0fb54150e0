"""Trained policy weights evaluated under several samplers: the inference-time choice of how chunks
are drawn (``rewind-eval sampler=... inference_steps=...``), nothing retrained.

Each (policy, sampler) is one ``rewind-eval`` run into ``ROOT/<policy>/<sampler>/`` (an existing
``summary.json`` is read, not rerun, so an interrupted driver resumes). A sampler is ``policy`` (as
trained), ``ddpm`` (every training step) or ``ddim:N[:ETA]`` (DDIM with N steps and ``eta``, default 0:
deterministic; 1: DDPM-like noise at every step); ``@A`` executes A actions per chunk (``ddpm@4``).

    MUJOCO_GL=osmesa .venv/bin/python bench/sampler_eval.py --task pick_place \\
        --policy base_s0=runs/issue13/guided03_s0/round_00/train \\
        --samplers policy ddim:30 ddim:100 ddpm --episodes 100 --seed 10000 \\
        --out bench/results/sampler_eval_pick_place.json

Writes ``--out`` (JSON: one row per policy and sampler, success with its 95% Wilson interval, the
stage histogram and the evaluation's wall time) and the Markdown table next to it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from _commands import rewind_bin, run_once, write_result  # noqa: E402  (bench/ is on sys.path)


def sampler_overrides(spec: str) -> list[str]:
    """``rewind-eval`` overrides of a sampler spec: ``policy``, ``ddpm`` or ``ddim:N[:ETA]``, each
    optionally ``@A`` (A actions executed per chunk)."""
    name, _, act = spec.partition("@")
    kind, *rest = name.split(":")
    steps, eta = (rest + ["", ""])[:2]
    ok = kind in ("policy", "ddim", "ddpm") and len(rest) <= (2 if kind == "ddim" else 0)
    ok = ok and (not steps or steps.isdigit()) and (not act or act.isdigit())
    try:
        ok = ok and (not eta or 0.0 <= float(eta) <= 1.0)
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(
            f"sampler_eval: bad sampler {spec!r}: expected policy | ddpm | ddim:N[:ETA], optionally @A"
        )
    out = [f"sampler={kind}"] + ([f"inference_steps={steps}"] if steps else [])
    out += [f"ddim_eta={eta}"] if eta else []
    return out + ([f"n_action_steps={act}"] if act else [])


def evaluate(name: str, path: str, spec: str, a: argparse.Namespace) -> dict[str, Any]:
    """One ``rewind-eval`` of ``path`` under ``spec``; its result row."""
    folder = Path(a.root) / a.task / name / spec.replace(":", "_").replace("@", "_act")
    cmd = [
        rewind_bin("rewind-eval"),
        f"policy_path={path}",
        f"env={a.task}",
        f"episodes={a.episodes}",
        f"seed={a.seed}",
        f"num_threads={a.threads}",
        "wandb.mode=disabled",
        *([f"env.max_steps={a.max_steps}"] if a.max_steps else []),
        *sampler_overrides(spec),
        f"out_dir={folder}",
    ]
    ev = run_once(cmd, folder)
    assert ev is not None
    return {
        "policy": name,
        "policy_path": path,
        "policy_version": ev["policy_version"],
        "sampler": spec,
        "denoising_steps": ev.get("denoising_steps"),
        "ddim_eta": ev.get("ddim_eta"),
        "n_action_steps": ev["n_action_steps"],
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "episodes": ev["episodes"],
        "stages": ev.get("max_stage_histogram"),
        "wall_time_s": ev.get("wall_time_s"),
    }


def table(rows: list[dict[str, Any]], seed: int) -> str:
    """The rows as a Markdown table."""
    lines = [
        f"| policy | sampler | denoising steps | actions per chunk | success (seeds {seed}..) | 95% Wilson "
        "| eval wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["ci95"]
        lines.append(
            f"| {r['policy']} | {r['sampler']} | {r['denoising_steps']} | {r['n_action_steps']} | "
            f"{r['success']:.0%} | [{lo:.2f}, {hi:.2f}] | {r['wall_time_s'] or 0:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run every (policy, sampler) and write the JSON and the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="pick_place")
    ap.add_argument("--policy", nargs="+", required=True, help="NAME=PATH (a run folder or weights)")
    ap.add_argument("--samplers", nargs="+", default=["policy", "ddpm"])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=10000, help="env seed of the first episode")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the task's)")
    ap.add_argument("--root", default="runs/sampler_eval")
    ap.add_argument("--out", default=None, help="default bench/results/sampler_eval_TASK.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    policies = [p.split("=", 1) for p in a.policy]
    if any(len(p) != 2 or not p[0] for p in policies):
        raise SystemExit(f"sampler_eval: --policy takes NAME=PATH; got {a.policy}")
    for spec in a.samplers:
        sampler_overrides(spec)  # all specs checked before anything runs
    out = Path(a.out or f"bench/results/sampler_eval_{a.task}.json")
    rows: list[dict[str, Any]] = []
    for name, path in policies:
        for spec in a.samplers:
            rows.append(evaluate(name, path, spec, a))
            write_result(
                out,
                {"task": a.task, "seed": a.seed, "episodes": a.episodes, "rows": rows},
                table(rows, a.seed),
            )


if __name__ == "__main__":
    main()
