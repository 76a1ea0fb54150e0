"""Issue-5 experiment: success vs operator steps for more demos, HG-DAgger, RaC, guided (ReGuide), and
test-time rewind on top of each trained policy.

Per task it runs committed commands, exactly as a user would, each into its own folder under ``--root``:

    rewind-collect env=TASK episodes=N seed=0 out=ROOT/TASK/demos_N/store          (a) N in TASKS
    rewind-train   env=TASK data.path=... train.steps=S ... out_dir=ROOT/TASK/demos_N/train
    rewind-calibrate / rewind-eval [monitor=tide rewind=restore]                   (a) and (e)
    rewind-loop    env=TASK base.policy_path=ROOT/TASK/demos_BASE/train recovery=dagger|operator|guided
                   rounds=R episodes_per_round=E seed=K eval.rewind=true out_dir=ROOT/TASK/METHOD_sK

The base of every loop is the smallest demo count's policy, so all methods start from the same
weights. Each run is skipped when its ``summary.json`` exists (and ``rewind-loop`` itself resumes at
round granularity), so an interrupted experiment continues where it stopped. Results: ``--out`` (JSON,
one point per (method, seed, round) with operator steps, success and its 95% Wilson interval, and the
success with test-time rewind) and one plot per task next to it.

    MUJOCO_GL=osmesa .venv/bin/python bench/loop_experiment.py --tasks pick_place --seeds 0 1 \
        --out bench/results/loop_experiment_pick_place.json
    MUJOCO_GL=osmesa .venv/bin/python bench/loop_experiment.py --tasks stack3 \
        --methods operator dagger guided --adopt stack3:100=runs/base_policies/stack3_d100_s10000 \
        --out bench/results/loop_experiment_stack3.json

(the exact commands behind docs/loop.md). ``--operator-model human_like`` runs every loop with the
human-like operator model (issue 13; folders ``METHOD_human_like_sK``). ``--parts demos`` /
``--parts loops`` run (a) or the loops alone, e.g. in two processes with one thread each.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from _commands import rewind_bin, run_once  # noqa: E402  (bench/ is on sys.path)
from _loop_report import save, with_control  # noqa: E402

from rewind.loop.lineage import round_dir

log = logging.getLogger("loop_experiment")

METHODS = {
    "dagger": "(b) HG-DAgger",
    "operator": "(c) RaC rewind + correct",
    "guided": "(d) guided (ReGuide)",
}
#: Per task: demo counts for (a) (the first is every loop's base), the from-scratch training recipe, the
#: episodes collected per loop round and the calibration rollouts (``--per-round`` / ``--cal-episodes``
#: override them). Stack3 needs more calibration rollouts: its base succeeds about 1 time in 4.
#: Stack3 uses bench/base_policies.py's long recipe (batch 256, 10k steps, 10% validation): shorter
#: recipes give a base that almost never succeeds (0-6% at 2,500 steps), which leaves no loop to run;
#: so ``--adopt stack3:100=runs/base_policies/stack3_d100_s10000`` reuses that run instead of repeating it.
TASKS: dict[str, dict[str, Any]] = {
    "pick_place": {
        "demos": [20, 40, 80],
        "steps": 2000,
        "train": [
            "train.batch_size=64",
            "train.warmup_steps=200",
            "data.val_fraction=0",
            "train.val_every=0",
        ],
        "per_round": 60,
        "cal_episodes": 30,
    },
    "stack3": {
        "demos": [100, 200],
        "steps": 10000,
        "train": [
            "train.batch_size=256",
            "train.warmup_steps=500",
            "data.val_fraction=0.1",
            "train.val_every=2000",
        ],
        "per_round": 40,
        "cal_episodes": 100,
    },
}


def _setting(a: argparse.Namespace, task: str, name: str) -> int:
    """The command line's value of ``name`` if given, else the task's default."""
    value = getattr(a, name)
    return int(TASKS[task][name] if value is None else value)


def _run(cmd: list[str], folder: Path) -> dict[str, Any]:
    """:func:`run_once` (the step's log is appended to, across resumes)."""
    result = run_once(cmd, folder, log_mode="a")
    assert result is not None
    return result


def more_demos(root: Path, task: str, n: int, steps: int, a: argparse.Namespace) -> dict[str, Any]:
    """(a): N scripted demos -> train from scratch -> evaluate, and (e) with test-time rewind."""
    base = root / task / f"demos_{n}"
    store = base / "store"
    col = _collect_and_train(base, store, task, n, steps, a)
    ev, evr = _evaluate_with_and_without_rewind(base, store, task, a)
    return {
        "method": "demos",
        "seed": 0,
        "round": 0,
        "demos": col["succeeded"],
        "operator_steps": col["store_info"]["n_operator_steps"],
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "episodes": ev["episodes"],
        "success_with_rewind": evr["success_rate"],
    }


def _collect_and_train(
    base: Path, store: Path, task: str, n: int, steps: int, a: argparse.Namespace
) -> dict[str, Any]:
    """Collect ``n`` scripted demos (seeds ``0..n-1``) into ``store`` and train a policy on them under
    ``base / 'train'``; returns the collection's summary."""
    col = _run(
        [
            rewind_bin("rewind-collect"),
            f"env={task}",
            f"episodes={n}",
            "seed=0",
            f"out={store}",
            f"out_dir={base / 'collect'}",
            "progress=false",
        ],
        base / "collect",
    )
    _run(
        [
            rewind_bin("rewind-train"),
            f"env={task}",
            f"data.path={store}",
            f"train.steps={steps}",
            *TASKS[task]["train"],
            f"train.save_every={steps}",
            f"num_threads={a.threads}",
            "device=cpu",
            "wandb.mode=disabled",
            "progress=false",
            f"out_dir={base / 'train'}",
        ],
        base / "train",
    )
    return col


def _evaluate_with_and_without_rewind(
    base: Path, store: Path, task: str, a: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Calibrate a TIDE monitor for ``base / 'train'`` on ``store``, then evaluate the policy on seeds
    ``10000..`` without and with test-time rewind (``restore``); returns both evaluations' summaries."""
    common = [f"policy_path={base / 'train'}", f"env={task}", "device=cpu", "num_threads=1", "progress=false"]
    _run(
        [
            rewind_bin("rewind-calibrate"),
            *common,
            f"data_path={store}",
            "monitor=tide",
            "monitor.alpha=0.2",
            f"episodes={_setting(a, task, 'cal_episodes')}",
            f"out_dir={base / 'calibration'}",
        ],
        base / "calibration",
    )
    ev = _run(
        [
            rewind_bin("rewind-eval"),
            *common,
            f"episodes={a.episodes}",
            "seed=10000",
            "wandb.mode=disabled",
            f"out_dir={base / 'eval'}",
        ],
        base / "eval",
    )
    evr = _run(
        [
            rewind_bin("rewind-eval"),
            *common,
            f"episodes={a.episodes}",
            "seed=10000",
            "wandb.mode=disabled",
            "monitor=tide",
            f"monitor.calibration={base / 'calibration'}",
            "rewind=restore",
            f"out_dir={base / 'eval_rewind'}",
        ],
        base / "eval_rewind",
    )
    return ev, evr


def loop(
    root: Path, task: str, method: str, seed: int, base: Path, a: argparse.Namespace, control: bool = True
) -> list[dict[str, Any]]:
    """(b)-(d): one ``rewind-loop`` from the shared base; one point per round. The control arm (the same
    fine-tuning on the demos alone) is identical for every method of a (task, seed), so only the first
    method's loop trains it (``control``)."""
    model = a.operator_model  # None: the config's default (perfect), folders as before
    out = root / task / (f"{method}_s{seed}" if model is None else f"{method}_{model}_s{seed}")
    s = _run(
        [
            rewind_bin("rewind-loop"),
            f"env={task}",
            f"base.policy_path={base}",
            f"recovery={method}",
            *([f"recovery/operator_model={model}"] if model else []),
            f"control={str(control).lower()}",
            f"rounds={a.rounds}",
            f"episodes_per_round={_setting(a, task, 'per_round')}",
            f"seed={seed}",
            f"collect_seed={30000 + 1000 * seed}",
            f"eval.episodes={a.episodes}",
            "eval.rewind=true",
            f"calibration.episodes={_setting(a, task, 'cal_episodes')}",
            *a.loop_args,
            "wandb.mode=offline",
            "progress=false",
            f"out_dir={out}",
        ],
        out,
    )
    return [
        {
            "method": method,
            "seed": seed,
            "round": r["round"],
            "operator_steps": r["operator_steps_total"],
            "success": r["success_rate"],
            "ci95": [r["success_ci95_low"], r["success_ci95_high"]],
            "episodes": a.episodes,
            "success_with_rewind": r["success_with_rewind"],
            "control_success": r.get("control_success"),
            "operator_model": model or "perfect",
            "operator_time_s": _operator_time(out, r["round"]),
        }
        for r in s["rounds"]
    ]


def _operator_time(out: Path, last: int) -> float:
    """Simulated operator time (s) of rounds 1..``last`` (each round's ``collect/summary.json``; the
    demos are not included)."""
    total = 0.0
    for r in range(1, last + 1):
        path = round_dir(out, r) / "collect" / "summary.json"
        if path.exists():
            total += float(json.loads(path.read_text()).get("source", {}).get("operator_time_s", 0.0))
    return round(total, 3)


def main(argv: list[str] | None = None) -> None:
    """Run the plan task by task; rewrite the JSON and plots after every run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/loop_experiment")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS))
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--per-round", type=int, default=None, help="episodes collected per round (default: per task)"
    )
    ap.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    ap.add_argument("--cal-episodes", type=int, default=None, help="calibration rollouts (default: per task)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loop-args", nargs="*", default=[], help="extra rewind-loop overrides")
    ap.add_argument(
        "--operator-model",
        choices=["perfect", "human_like"],
        default=None,
        help="recovery/operator_model=NAME for every loop (folders METHOD_NAME_sK); "
        "default: the config's (perfect)",
    )
    ap.add_argument(
        "--parts", nargs="*", default=["demos", "loops"], help="run (a) 'demos', the 'loops', or both"
    )
    ap.add_argument(
        "--adopt", nargs="*", default=[], help="TASK:N=FOLDER: reuse a base_policies run as (a)'s N"
    )
    ap.add_argument(
        "--out", default="bench/results/loop_experiment.json", help="NAME_TASK.json: one task's files"
    )
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    root, out = Path(a.root), Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"command": " ".join(sys.argv), "tasks": {}}
    for item in a.adopt:
        adopt(root, item)
    for task in a.tasks:
        plan, points = TASKS[task], []
        results["tasks"][task] = {"plan": plan, "points": points}
        first, *more = plan["demos"]
        parts = [("demos", first)] + [("loops", None)] + [("demos", n) for n in more]
        for part, n in parts:  # the loops need only the base; the larger demo counts come last
            if part not in a.parts:
                continue
            if part == "demos":
                points.append(more_demos(root, task, n, plan["steps"], a))
                save(results, out, task, points, METHODS)
                continue
            base = root / task / f"demos_{first}" / "train"
            for seed in a.seeds:
                for i, method in enumerate(a.methods):
                    points += loop(root, task, method, seed, base, a, control=i == 0)
                    save(results, out, task, with_control(points), METHODS)


def adopt(root: Path, item: str) -> None:
    """``TASK:N=FOLDER``: use FOLDER's ``store``, ``collect`` and ``train`` (a ``bench/base_policies.py``
    run with the task's recipe) as (a)'s N-demo run instead of repeating it (symlinks)."""
    key, _, folder = item.partition("=")
    task, _, n = key.partition(":")
    src, dst = Path(folder).resolve(), root / task / f"demos_{n}"
    if task not in TASKS or not n.isdigit() or not (src / "train" / "summary.json").exists():
        raise SystemExit(
            f"--adopt {item!r}: want TASK:N=FOLDER with a finished FOLDER/train; tasks: {list(TASKS)}"
        )
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("store", "collect", "train"):
        if not (dst / name).exists():
            (dst / name).symlink_to(src / name, target_is_directory=True)


if __name__ == "__main__":
    main()
