"""Issue 16, item 5: the base diffusion policy, the monitor with rewind, and the default loop on the
robosuite tasks (robomimic's Lift and Can), each stage a committed command run as a user would.

Per task (``--tasks lift can``), each into its own folder under ``--root``:

    rewind-collect   env=robosuite_TASK episodes=DEMOS seed=0 out=ROOT/TASK/store        scripted demos
    rewind-train     env=robosuite_TASK data.path=... train.steps=S train.batch_size=B     base policy
    rewind-eval      policy_path=ROOT/TASK/train episodes=N seed=10000                      base success
    rewind-calibrate policy_path=... data_path=... monitor=tide monitor.alpha=A episodes=C seed=20000
    rewind-eval      ... monitor=tide monitor.calibration=ROOT/TASK/calibrate rewind=restore
    rewind-loop      env=robosuite_can base.policy_path=ROOT/can/train rounds=R control=true   (--loop-tasks)

A stage is skipped when its ``summary.json`` exists (``rewind-loop`` itself resumes by round), so an
interrupted run continues where it stopped. A calibration that gets too few successful rollouts for
alpha is recorded as such (its one-line error) and its monitored evaluation is skipped. Output: ``--out``
(JSON: every stage's summary numbers and wall time) and the Markdown tables next to it (``.md``).

    MUJOCO_GL=osmesa .venv-robosuite/bin/python bench/robosuite_results.py \\
        --root runs/robosuite_results --out bench/results/robosuite_results.json

Runs in the robosuite extra's virtualenv (``bash .ci/robosuite_venv.sh``); the console scripts are the
running interpreter's. ``--tiny`` shrinks everything to a seconds-long smoke run (for checking the
driver, not for results).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

from _commands import rewind_bin, run_once, write_result  # noqa: E402  (bench/ is on sys.path)

log = logging.getLogger("robosuite_results")

#: Per task: demos, training steps and batch. Sized from the costs measured on the loaded 2-core
#: machine (docs/robosuite.md "Results (item 5)"): batch 64 trains at ~0.15 s/step, so Lift's 2,000
#: steps take ~5 min and Can's 4,000 ~10 min; a Lift demo takes ~0.5 s, a Can demo ~1.2 s.
#: ``max_correction_steps``: the loop's operator budget per intervention (a Can stage takes longer
#: than the native tasks' ~15 steps: the operator needs ~100 steps for the whole task).
PLAN: dict[str, dict[str, Any]] = {
    "lift": {"demos": 100, "steps": 2000, "batch": 64, "max_correction_steps": 40},
    "can": {"demos": 100, "steps": 4000, "batch": 64, "max_correction_steps": 80},
}
#: --tiny: the smoke-test policy and budgets (seconds per stage).
TINY_POLICY = [
    "policy.down_dims=[16,32]",
    "policy.obs_feature_dim=16",
    "policy.horizon=8",
    "policy.n_action_steps=4",
]


def _run(cmd: list[str], folder: Path) -> dict[str, Any] | None:
    """``run_once``; a command that exits 2 (a user error, e.g. too few calibration successes)
    returns ``None`` and leaves its one-line error in ``folder/../<folder>.log``."""
    try:
        return run_once(cmd, folder)
    except subprocess.CalledProcessError as exc:
        if exc.returncode != 2:
            raise
        log.warning("%s: exit 2: %s", folder, _last_line(folder))
        return None


def _last_line(folder: Path) -> str:
    lines = (folder.parent / f"{folder.name}.log").read_text().strip().splitlines()
    return lines[-1] if lines else ""


def _wall(folder: Path) -> float | None:
    """The command's wall time (``run.json``'s ``duration_s``)."""
    run = folder / "run.json"
    return json.loads(run.read_text()).get("duration_s") if run.exists() else None


#: the overrides of every command with metrics (W&B offline: the runs stay on this machine)
COMMON = ["progress=false", "wandb.mode=offline"]


def base_stages(task: str, a: argparse.Namespace) -> dict[str, Any]:
    """Collect, train and evaluate the base policy of ``task``; its rows."""
    plan, root, env = PLAN[task], Path(a.root) / task, f"env=robosuite_{task}"
    demos = a.demos or plan["demos"]
    steps, batch = a.steps or plan["steps"], a.batch or plan["batch"]
    store = root / "store"
    collect = [rewind_bin("rewind-collect"), env, f"episodes={demos}", "seed=0", f"out={store}"]
    col = run_once([*collect, "progress=false", f"out_dir={root / 'collect'}"], root / "collect")
    train = [rewind_bin("rewind-train"), env, "policy=diffusion", f"data.path={store}"]
    train += [f"train.steps={steps}", f"train.batch_size={batch}", f"train.save_every={steps}"]
    train += [f"train.val_every={max(1, steps // 5)}", f"train.warmup_steps={min(200, steps // 10)}"]
    train += [*(TINY_POLICY if a.tiny else []), *COMMON, f"out_dir={root / 'train'}"]
    tr = run_once(train, root / "train")
    ev = run_once(_eval_cmd(task, a, root / "eval"), root / "eval")
    assert col is not None and tr is not None and ev is not None
    return {
        "demos": {
            "episodes": col["episodes"],
            "succeeded": col["succeeded"],
            "mean_length": col["mean_length"],
            "wall_s": col["wall_time_s"],
            "s_per_episode": round(col["wall_time_s"] / col["episodes"], 3),
        },
        "train": {
            "steps": steps,
            "batch_size": batch,
            "final_train_loss": tr.get("final_train_loss"),
            "parameters": tr.get("parameters"),
            "wall_s": _wall(root / "train"),
        },
        "eval": _eval_row(ev, root / "eval"),
    }


def _eval_cmd(task: str, a: argparse.Namespace, out: Path, *extra: str) -> list[str]:
    root = Path(a.root) / task
    cmd = [rewind_bin("rewind-eval"), f"env=robosuite_{task}", f"policy_path={root / 'train'}"]
    cmd += [f"episodes={a.episodes}", f"seed={a.eval_seed}", "num_threads=1", *extra]
    return [*cmd, *(["env.max_steps=30"] if a.tiny else []), *COMMON, f"out_dir={out}"]


def _eval_row(ev: dict[str, Any], folder: Path) -> dict[str, Any]:
    row = {
        "episodes": ev["episodes"],
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "mean_length": ev["mean_length"],
        "stages": ev.get("max_stage_histogram"),
        "wall_s": _wall(folder),
    }
    mon = ev.get("monitor")
    if mon:
        keep = ("alpha", "threshold", "episodes_with_alarm", "rewinds", "successes_after_rewind")
        row["monitor"] = {k: mon.get(k) for k in keep} | {"rewind": mon.get("rewind")}
    return row


def monitor_stages(task: str, a: argparse.Namespace) -> dict[str, Any]:
    """Calibrate TIDE on the base policy, then evaluate under the monitor with rewind=restore."""
    root = Path(a.root) / task
    cal_dir, mon_dir = root / "calibrate", root / "eval_monitor"
    cmd = [rewind_bin("rewind-calibrate"), f"env=robosuite_{task}", f"policy_path={root / 'train'}"]
    cmd += [f"data_path={root / 'store'}", "monitor=tide", f"monitor.alpha={a.alpha}"]
    cmd += [f"episodes={a.cal_episodes}", "seed=20000", "num_threads=1", "progress=false"]
    cmd += [*(["env.max_steps=30"] if a.tiny else []), f"out_dir={cal_dir}"]
    cal = _run(cmd, cal_dir)
    out: dict[str, Any] = {
        "calibrate": {"episodes": a.cal_episodes, "alpha": a.alpha, "wall_s": _wall(cal_dir)}
    }
    if cal is None:
        out["calibrate"]["error"] = _last_line(cal_dir)
        return out
    out["calibrate"].update({k: cal.get(k) for k in ("n", "threshold", "success_rate", "checkpoints")})
    extra = ("monitor=tide", f"monitor.calibration={cal_dir}", "rewind=restore")
    ev = run_once(_eval_cmd(task, a, mon_dir, *extra), mon_dir)
    assert ev is not None
    out["eval_monitor"] = _eval_row(ev, mon_dir)
    return out


def loop_stage(task: str, a: argparse.Namespace) -> dict[str, Any]:
    """The default loop (RaC: drive rewind + scripted operator) from the base policy, with its
    demos-only control arm."""
    root = Path(a.root) / task
    out_dir = root / "loop"
    cmd = [rewind_bin("rewind-loop"), f"env=robosuite_{task}", f"base.policy_path={root / 'train'}"]
    cmd += [f"base.demos_path={root / 'store'}", f"rounds={a.loop_rounds}", "control=true", "seed=0"]
    cmd += [f"recovery.max_correction_steps={PLAN[task]['max_correction_steps']}"]
    if a.loop_episodes:
        cmd.append(f"episodes_per_round={a.loop_episodes}")
    if a.tiny:
        cmd += ["env.max_steps=60", "finetune.steps=4", "calibration.episodes=2", "promotion.episodes=2"]
        cmd += ["eval.episodes=2", "eval.num_envs=2", "recovery.stall_steps=8"]
    summary = run_once([*cmd, *COMMON, f"out_dir={out_dir}"], out_dir)
    assert summary is not None
    keep = ("round", "policy_version", "episodes_collected", "interventions", "operator_steps_round")
    keep += ("success_rate", "success_ci95_low", "success_ci95_high", "control_success", "promoted")
    return {
        "rounds": [{k: r.get(k) for k in keep} for r in summary["rounds"]],
        "success_before": summary["success_before"],
        "success_after": summary["success_after"],
        "control_after": summary.get("control_after"),
        "wall_s": _wall(out_dir),
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _min(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f} min"


def markdown(result: dict[str, Any]) -> str:
    """The Markdown tables of ``result`` (base and monitor per task; the loop's rounds)."""
    n, seed = result["episodes"], result["eval_seed"]
    lines = [
        f"| task | demos (s/demo) | training (steps x batch, wall) | base success ({n} episodes, seeds {seed}..) "
        "| monitored + rewind=restore | rewinds | calibration |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, r in result["tasks"].items():
        d, t, e = r["demos"], r["train"], r["eval"]
        cal, mon = r.get("calibrate", {}), r.get("eval_monitor")
        cal_text = (
            cal.get("error") or f"alpha {cal.get('alpha')}, n {cal.get('n')}, {_min(cal.get('wall_s'))}"
        )
        mon_text = f"{_pct(mon['success'])} {_ci(mon['ci95'])}" if mon else "-"
        rewinds = mon["monitor"]["rewinds"] if mon and mon.get("monitor") else "-"
        lines.append(
            f"| {task} | {d['succeeded']}/{d['episodes']} ({d['s_per_episode']} s) "
            f"| {t['steps']} x {t['batch_size']}, {_min(t['wall_s'])} | {_pct(e['success'])} {_ci(e['ci95'])}, "
            f"{_min(e['wall_s'])} | {mon_text} | {rewinds} | {cal_text} |"
        )
    for task, loop in result.get("loops", {}).items():
        lines += ["", f"Loop on {task} (RaC, control=true), {_min(loop['wall_s'])}:", ""]
        lines += [
            "| round | success | 95% Wilson | control (demos only) | operator steps |",
            "|---|---|---|---|---|",
        ]
        for r in loop["rounds"]:
            ci = _ci([r["success_ci95_low"], r["success_ci95_high"]])
            lines.append(
                f"| {r['round']} | {_pct(r['success_rate'])} | {ci} | {_pct(r['control_success'])} "
                f"| {r['operator_steps_round']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run every stage (resuming finished ones) and write the JSON and the Markdown tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/robosuite_results")
    ap.add_argument("--tasks", nargs="*", default=list(PLAN), choices=list(PLAN))
    ap.add_argument("--loop-tasks", nargs="*", default=["can"], choices=list(PLAN))
    ap.add_argument("--demos", type=int, default=None, help="default: PLAN's per task")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: PLAN's per task)")
    ap.add_argument("--batch", type=int, default=None, help="training batch (default: PLAN's per task)")
    ap.add_argument("--episodes", type=int, default=100, help="evaluation episodes (plain and monitored)")
    ap.add_argument("--eval-seed", type=int, default=10000)
    ap.add_argument("--cal-episodes", type=int, default=50)
    ap.add_argument("--alpha", type=float, default=0.2, help="the loop's alpha: >= 4 successful rollouts")
    ap.add_argument("--loop-rounds", type=int, default=1)
    ap.add_argument(
        "--loop-episodes", type=int, default=None, help="episodes per round (default: the loop's 60)"
    )
    ap.add_argument("--tiny", action="store_true", help="a seconds-long smoke run of the driver")
    ap.add_argument("--out", default="bench/results/robosuite_results.json")
    a = ap.parse_args()
    if not set(a.loop_tasks) <= set(a.tasks):
        ap.error(f"--loop-tasks {a.loop_tasks} start from the base policies of --tasks {a.tasks}")
    if a.tiny:  # seconds per stage
        a.demos, a.steps, a.batch = a.demos or 2, a.steps or 20, a.batch or 8
        a.episodes, a.cal_episodes, a.loop_episodes = 2, 2, a.loop_episodes or 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    result: dict[str, Any] = {"episodes": a.episodes, "eval_seed": a.eval_seed, "tiny": a.tiny, "tasks": {}}
    for task in a.tasks:
        result["tasks"][task] = base_stages(task, a) | monitor_stages(task, a)
        write_result(Path(a.out), result, markdown(result))
    result["loops"] = {task: loop_stage(task, a) for task in a.loop_tasks}
    write_result(Path(a.out), result, markdown(result))


if __name__ == "__main__":
    main()
