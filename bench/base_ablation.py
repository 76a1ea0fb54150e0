"""A long task's base policy, one setting changed at a time: which changes make the 100-demo base stronger.

Every variant trains on the same store (``rewind-collect env=TASK episodes=DEMOS seed=0``) with the
same steps, batch and seed, and only its overrides differ; each is evaluated on the same episodes.
Settings are chosen on the tuning seeds (``--eval-seed 10000``, the range every earlier result
used); the chosen recipe is then reported on seeds never used to choose anything (``--eval-seed
70000``, a separate ``eval_s70000`` folder per variant).

    MUJOCO_GL=osmesa .venv/bin/python bench/base_ablation.py --root runs/base_ablation/stack3 \
        --variants baseline scale_floor_0.5 --out bench/results/base_ablation_stack3.json

Each variant's runs go to ``ROOT/<variant>_s<steps>/``; they are reused when their ``summary.json``
exists, so an interrupted sweep resumes. Output: JSON rows and a Markdown table (``--out`` with ``.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from _base_variants import VARIANTS  # bench/ is on sys.path when a script there runs
from _commands import rewind_bin, run_once, write_result


def collect(a: argparse.Namespace) -> Path:
    """The shared demo store."""
    root = Path(a.root)
    run_once(
        [
            rewind_bin("rewind-collect"),
            f"env={a.task}",
            f"episodes={a.demos}",
            "seed=0",
            f"out={root / 'store'}",
            f"out_dir={root / 'collect'}",
            "progress=false",
        ],
        root / "collect",
    )
    return root / "store"


def _policy_choice(overrides: list[str]) -> list[str]:
    """The variant's ``policy=NAME`` override, or ``policy=diffusion`` (Hydra takes a group once)."""
    return [o for o in overrides if o.startswith("policy=")][-1:] or ["policy=diffusion"]


def training_overrides(name: str, round_store: str | None = None) -> list[str]:
    """The ``rewind-train`` overrides variant ``name`` trains with: its own, or those of the variant whose
    training it reuses, with ``ROUND_STORE`` replaced by ``round_store`` (required where it appears)."""
    variant = VARIANTS[name]
    overrides = VARIANTS[variant.train_as].train if variant.train_as else variant.train
    if any("ROUND_STORE" in o for o in overrides):
        if not round_store:
            raise SystemExit(f"variant {name} needs --round-store (a loop round's collect/store)")
        overrides = [o.replace("ROUND_STORE", round_store) for o in overrides]
    return overrides


def run_variant(name: str, store: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Train and evaluate one variant; its result row."""
    variant = VARIANTS[name]
    tag = a.tag + (f"_seed{a.train_seed}" if a.train_seed else "")
    out = Path(a.root) / f"{name}{tag}_s{a.steps}"
    trained = Path(a.root) / f"{variant.train_as or name}{tag}_s{a.steps}"
    train_overrides = training_overrides(name, a.round_store)
    train = run_once(
        [
            rewind_bin("rewind-train"),
            f"env={a.task}",
            *_policy_choice(train_overrides),
            f"data.path={store}",
            f"train.steps={a.steps}",
            f"train.save_every={a.steps}",
            f"train.val_every={a.steps // 5}",
            "num_threads=2",
            "wandb.mode=offline",
            f"seed={a.train_seed}",
            *[o for o in train_overrides if not o.startswith("policy=")],
            f"out_dir={trained / 'train'}",
        ],
        trained / "train",
    )
    eval_dir = out / ("eval" if a.eval_seed == 10000 else f"eval_s{a.eval_seed}")
    ev = run_once(
        [
            rewind_bin("rewind-eval"),
            f"policy_path={trained / 'train'}",
            f"env={a.task}",
            f"episodes={a.episodes}",
            f"seed={a.eval_seed}",
            "num_threads=1",
            *variant.eval,
            f"out_dir={eval_dir}",
        ],
        eval_dir,
    )
    assert train is not None and ev is not None
    run = json.loads((trained / "train" / "run.json").read_text())
    return {
        "variant": name,
        "changes": variant.what,
        "overrides": train_overrides + variant.eval,
        "eval_seed": a.eval_seed,
        "train_seed": a.train_seed,
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "episodes": ev["episodes"],
        "train_wall_time_s": run.get("duration_s"),
        "stages": ev.get("max_stage_histogram"),
    }


def main() -> None:
    """Run the variants and write the JSON and the Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/base_ablation/stack3")
    ap.add_argument("--task", default="stack3")
    ap.add_argument("--demos", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--eval-seed", type=int, default=10000, help="10000: tuning seeds; 70000: report seeds")
    ap.add_argument("--variants", nargs="*", default=[v for v in VARIANTS if not v.startswith("fs_round")])
    ap.add_argument(
        "--round-store", default=None, help="fs_round: the loop round store whose interventions are added"
    )
    ap.add_argument(
        "--tag",
        default="",
        help="appended to the variants' folder names (e.g. _loop1 for fs_round on another round store)",
    )
    ap.add_argument(
        "--train-seed",
        type=int,
        default=0,
        help="rewind-train's seed (init, batches, validation split); a nonzero one runs under <variant>_seedN_s<steps>",
    )
    ap.add_argument("--out", default="bench/results/base_ablation_stack3.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    store = collect(a)
    rows = [run_variant(name, store, a) for name in a.variants]
    lines = [
        f"| variant | what changes | success ({a.episodes} episodes, seeds {a.eval_seed}..) | 95% Wilson "
        "| train wall time |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        wall = f"{r['train_wall_time_s'] / 60:.1f} min" if r["train_wall_time_s"] else "?"
        lo, hi = r["ci95"]
        lines.append(
            f"| {r['variant']} | {r['changes']} | {r['success']:.0%} | [{lo:.2f}, {hi:.2f}] | {wall} |"
        )
    write_result(
        Path(a.out),
        {"task": a.task, "demos": a.demos, "steps": a.steps, "train_seed": a.train_seed, "rows": rows},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
