"""Why fine-tuning on Stack3's intervention data lowers success: one loop round's data, several recipes.

Each variant is the loop's fine-tuning step run by hand (``rewind-train init.from_weights=BASE`` on the
demos plus one round's store, 600 steps, batch 64) with one setting changed, then ``rewind-eval`` on
the loop's 100 evaluation seeds. The default round store is round 1 of the HG-DAgger loop of
``bench/loop_experiment.py``; the base is its 100-demo Stack3 policy.

    MUJOCO_GL=osmesa .venv/bin/python bench/finetune_ablation.py \
        --out bench/results/finetune_ablation_stack3.json

The issue-12 variants (size-matched repetition controls, the passes cap, the stage split, pinned
channels) on the 10,000-step base of ``bench/base_ablation.py`` and a fresh HG-DAgger round: the second
command in docs/loop.md, "Why corrections collapse Stack3".

Runs are reused when their ``summary.json`` exists. Output: JSON rows and a Markdown table (``--out``
with ``.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from _commands import rewind_bin, run_once, write_result  # noqa: E402  (bench/ is on sys.path)
from _finetune_variants import ROOT, VARIANTS  # noqa: E402

from rewind.utils.io import atomic_write_text


def _weights_with_clip(base: Path, clip: float, folder: Path) -> Path:
    """A copy of ``base``'s weights whose config says ``obs_clip=clip`` (the tensors are unchanged), so
    ``init.from_weights`` accepts a run with that setting."""
    if not folder.exists():
        shutil.copytree(base, folder)
        meta = json.loads((folder / "config.json").read_text())
        meta["config"]["obs_clip"] = clip
        atomic_write_text(folder / "config.json", json.dumps(meta, indent=2))
    return folder


def own_successes(a: argparse.Namespace) -> str:
    """A store of the base policy's successful plain rollouts: ``rewind-eval store_out=...`` on 100 seeds,
    the successful episodes copied into their own store."""
    from rewind.store import ReplayStore

    root = Path(a.root)
    run_once(
        [
            rewind_bin("rewind-eval"),
            f"policy_path={Path(a.base_weights).parent.parent}",
            f"env={a.env}",
            "episodes=100",
            "seed=50000",
            "num_threads=2",
            "device=cpu",
            "progress=false",
            "wandb.mode=disabled",
            f"store_out={root / 'own_rollouts'}",
            f"out_dir={root / 'own_rollouts_eval'}",
        ],
        root / "own_rollouts_eval",
    )
    out = root / "own_successes"
    if not out.exists():
        tmp = root / "own_successes.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with ReplayStore.open(root / "own_rollouts") as src, ReplayStore.create(tmp, src.spec) as dst:
            for info in src.episodes(success=True):
                ep = src.load(info.id)
                dst.add_episode(
                    ep.obs, ep.actions, ep.states, ep.source_names, meta={"seed": info.seed, "success": True}
                )
        tmp.rename(out)
    return str(out)


def round_steps(a: argparse.Namespace) -> int:
    """The round store's intervention steps (what the loop trains on)."""
    from rewind.store import ReplayStore

    labels = ("correction", "recovery", "human")
    with ReplayStore.open(a.round_store) as store:
        return sum(i.source_counts.get(lbl, 0) for i in store.episodes() for lbl in labels)


def _copy_store(src_path: Path | str, out: Path, pick: Any) -> str:
    """A new store at ``out`` holding, per episode of ``src_path``, the labels ``pick(info, episode)``
    returns (``None``: leave the episode out; ``"stop"``: end the copy); built beside ``out`` and
    renamed into place."""
    from rewind.store import ReplayStore

    if not out.exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with ReplayStore.open(src_path) as src, ReplayStore.create(tmp, src.spec) as dst:
            for info in src.episodes():
                ep = src.load(info.id)
                sources = pick(info, ep)
                if isinstance(sources, str):
                    break
                if sources is not None:
                    dst.add_episode(
                        ep.obs,
                        ep.actions,
                        ep.states,
                        sources,
                        meta={"seed": info.seed, "success": info.success},
                    )
        tmp.rename(out)
    return str(out)


def matched(src: str, out: Path, steps: int) -> str:
    """The first episodes of ``src`` until their steps reach ``steps``."""
    total = [0]

    def pick(info: Any, ep: Any) -> Any:
        if total[0] >= steps:
            return "stop"
        total[0] += len(ep.actions)
        return ep.source_names

    return _copy_store(src, out, pick)


def late_stages(a: argparse.Namespace) -> str:
    """The round store with the corrections made before green was grasped relabelled ``policy`` (weight 0)."""
    from rewind.envs.registry import make_env

    env = make_env("stack3").unwrapped

    def pick(info: Any, ep: Any) -> list[str]:
        names = ep.source_names
        for t, state in enumerate(ep.states):
            env.set_physics_state(state)
            if names[t] in ("correction", "recovery") and env.stage() == 0:
                names[t] = "policy"
        return names

    return _copy_store(a.round_store, Path(a.root) / "late_stages_store", pick)


def variant_store(store: str | None, a: argparse.Namespace) -> str | None:
    """The extra store a variant trains on (None: the round store)."""
    root = Path(a.root)
    if store == "OWN":
        return own_successes(a)
    if store == "MATCHED_OWN":
        return matched(own_successes(a), root / "own_matched_store", round_steps(a))
    if store == "MATCHED_DEMOS":
        run_once(
            [
                rewind_bin("rewind-collect"),
                f"env={a.env}",
                "episodes=40",
                "seed=1000",
                f"out={root / 'new_demos'}",
                f"out_dir={root / 'new_demos_collect'}",
                "progress=false",
            ],
            root / "new_demos_collect",
        )
        return matched(str(root / "new_demos"), root / "demos_matched_store", round_steps(a))
    if store == "LATE":
        return late_stages(a)
    return store


def pinned_weights(a: argparse.Namespace, rel: float = 0.05) -> tuple[Path, list[str]]:
    """A copy of the ``as_loop`` variant's weights in which every observation dimension whose demo scale
    is below ``rel`` times its key's widest (a cube's quaternion x/y, a resting cube's height) has its
    normalization scale set to 1e9, so the policy sees it at the demo centre whatever its value."""
    import torch

    from rewind.policies.io import load_policy_weights, read_policy_meta, save_policy_weights
    from rewind.train.policy_api import resolve_weights

    src = resolve_weights(str(Path(a.root) / "as_loop" / "train"))
    out = Path(a.root) / "weights_as_loop_pinned"
    policy = load_policy_weights(src)
    pinned = []
    for key, stats in policy.normalizer.stats.items():
        if key.startswith("obs/"):
            small = stats.scale < rel * stats.scale.max()
            pinned += [f"{key[4:]}[{i}]" for i in torch.nonzero(small).flatten().tolist()]
            stats.scale[small] = 1e9
    if not (out / "config.json").exists():
        save_policy_weights(policy, out, read_policy_meta(src).get("extra", {}))
    return out, pinned


def variant_dir(name: str, seed: int) -> str:
    """A variant's folder under ``--root``: its name for fine-tuning seed 1, ``<name>_s<seed>`` else."""
    return name if seed == 1 else f"{name}_s{seed}"


def run_variant(name: str, a: argparse.Namespace, seed: int = 1) -> dict[str, Any]:
    """Fine-tune (seed ``seed``) and evaluate one variant; its result row."""
    what, extra, store = VARIANTS[name]
    out = Path(a.root) / variant_dir(name, seed)
    weights = Path(a.base_weights)
    if name.startswith("obs_clip_"):
        clip = float(name.removeprefix("obs_clip_"))
        weights = _weights_with_clip(weights, clip, Path(a.root) / f"weights_{name}")
    if store == "PINNED":
        return pinned_variant(name, a)
    store = variant_store(store, a)
    ov = {
        "env": a.env,
        "data.path": a.demos,
        "data.extra_paths": f"[{store or a.round_store}]",
        "data.mix": "[0.2,0.8]",
        "data.val_fraction": "0",
        "+data.sample_weights": "{policy: 0.0, pre_intervention: 0.0}",
        "data.sample_weight_mode": "sample",
        "init.from_weights": str(weights),
        "seed": str(seed),
        "train.steps": "600",
        "train.batch_size": "64",
        "train.lr": "3e-4",
        "train.warmup_steps": "50",
        "train.save_every": "600",
        "train.val_every": "0",
        "num_threads": "2",
        "device": "cpu",
        "wandb.mode": "disabled",
        "progress": "false",
        "out_dir": str(out / "train"),
    }
    for item in extra:
        key, _, value = item.partition("=")
        ov[key] = value
    if ov["data.mix"] == "MAX_PASSES_4":  # what rewind-loop finetune.max_passes=4 computes
        from rewind.loop.stages import mix_shares

        mix = mix_shares(0.2, [round_steps(a)], max_passes=4, samples=600 * 64)
        ov["data.mix"] = f"[{mix[0]:.6f},{mix[1]:.6f}]"
    if ov.get("data.drop_steps_paths") == "DROP":
        if not a.drop_steps:
            raise SystemExit(f"variant {name} needs --drop-steps (a loop's conflict_filter/round_QQ.json)")
        ov["data.drop_steps_paths"] = f"[null,{a.drop_steps}]"
    if ov["data.extra_paths"] == "[]":
        del ov["data.mix"]
    cmd = [rewind_bin("rewind-train"), *(f"{k}={v}" for k, v in ov.items())]
    run_once(cmd, out / "train")
    ev = evaluate(out / "train", out, a)
    return {
        "variant": name,
        "seed": seed,
        "changes": what,
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "stages": ev.get("max_stage_histogram"),
    }


def evaluate(policy_path: Path | str, out: Path, a: argparse.Namespace) -> dict[str, Any]:
    """``rewind-eval`` of ``policy_path`` on the 100 evaluation episodes every variant uses (seeds
    ``--eval-seed``..), into ``out/eval``."""
    ev = run_once(
        [
            rewind_bin("rewind-eval"),
            f"policy_path={policy_path}",
            f"env={a.env}",
            "episodes=100",
            f"seed={a.eval_seed}",
            "num_threads=2",
            "device=cpu",
            "progress=false",
            "wandb.mode=disabled",
            f"out_dir={out / 'eval'}",
        ],
        out / "eval",
    )
    assert ev is not None
    return ev


def pinned_variant(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """Evaluate :func:`pinned_weights` like every variant."""
    weights, pinned = pinned_weights(a)
    out = Path(a.root) / name
    ev = evaluate(weights, out, a)
    return {
        "variant": name,
        "changes": VARIANTS[name][0] + f" ({', '.join(pinned)})",
        "success": ev["success_rate"],
        "ci95": ev["success_ci95"],
        "stages": ev.get("max_stage_histogram"),
    }


def main() -> None:
    """Run every variant (or ``--variants``) and write the JSON and Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="runs/finetune_ablation")
    ap.add_argument("--demos", default=f"{ROOT}/demos_100/store")
    ap.add_argument("--base-weights", default=f"{ROOT}/demos_100/train/weights/step_010000")
    ap.add_argument("--round-store", default=f"{ROOT}/dagger_s0/round_01/collect/store")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--env", default="stack3", help="the env the demos and round store come from")
    ap.add_argument("--seeds", nargs="*", type=int, default=[1], help="fine-tuning seeds (each variant)")
    ap.add_argument("--eval-seed", type=int, default=10000, help="first of the 100 evaluation seeds")
    ap.add_argument("--drop-steps", default=None, help="conflict_filtered: the filter's drop file")
    ap.add_argument("--out", default="bench/results/finetune_ablation_stack3.json")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    rows = [run_variant(name, a, seed) for seed in a.seeds for name in a.variants]
    lines = [
        "| variant | seed | what changes | success (100 episodes) | 95% Wilson |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['variant']} | {r.get('seed', 1)} | {r['changes']} | {r['success']:.0%} "
        f"| [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] |"
        for r in rows
    ]
    write_result(
        Path(a.out),
        {
            "env": a.env,
            "round_store": a.round_store,
            "base_weights": a.base_weights,
            "eval_seed": a.eval_seed,
            "rows": rows,
        },
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
