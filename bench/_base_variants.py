"""The variants of ``bench/base_ablation.py``: one setting of a long task's base policy changed at a time.

A *trained* variant changes ``rewind-train`` overrides and trains its own policy; an *evaluation-only*
variant reuses another variant's trained policy and changes only ``rewind-eval`` overrides (chunk
execution, sampler, denoising steps), so it costs no training.
"""

from __future__ import annotations

from typing import NamedTuple


class Variant(NamedTuple):
    """One variant: what it changes, its ``rewind-train`` and ``rewind-eval`` overrides, and the variant
    whose trained policy it reuses (``None``: it trains its own)."""

    what: str
    train: list[str]
    eval: list[str]
    train_as: str | None


def trained(what: str, *train_overrides: str) -> Variant:
    """A variant that trains its own policy with ``train_overrides`` on top of the base recipe."""
    return Variant(what, list(train_overrides), [], None)


def eval_only(what: str, train_as: str, *eval_overrides: str) -> Variant:
    """A variant that evaluates ``train_as``'s policy with ``eval_overrides``."""
    return Variant(what, [], list(eval_overrides), train_as)


ACT2, ACT4 = "n_action_steps=2", "n_action_steps=4"
H8 = "all 100 demos, 8-action chunks, executing"

#: name -> variant. ``fs_round*`` need ``--round-store`` and are left out of the default sweep.
VARIANTS: dict[str, Variant] = {
    "baseline": trained("the default diffusion policy"),
    "scale_floor_0.5": trained(
        "per obs key, no dim scaled below half the key's widest (policy.obs_scale_floor)",
        "policy.obs_scale_floor=0.5",
    ),
    "act4": eval_only("execute 4 actions per chunk instead of 8 (eval n_action_steps)", "baseline", ACT4),
    "act2": eval_only("execute 2 actions per chunk instead of 8", "baseline", ACT2),
    "ddpm": eval_only(
        "sample chunks with DDPM (all 100 training steps) instead of DDIM-10 (eval sampler)",
        "baseline",
        "sampler=ddpm",
    ),
    "ddim_eta1": eval_only(
        "DDIM-10 with eta 1 at evaluation (noise at every step, as DDPM); "
        "policies trained since 2026-12-05 sample so by default",
        "baseline",
        "ddim_eta=1.0",
    ),
    "ddpm_act4": eval_only("DDPM-100, executing 4 actions per chunk", "baseline", "sampler=ddpm", ACT4),
    "ddim_eta1_act4": eval_only(
        "DDIM-10 with eta 1, executing 4 actions per chunk", "baseline", "ddim_eta=1.0", ACT4
    ),
    "ddim_eta1_act2": eval_only(
        "DDIM-10 with eta 1, executing 2 actions per chunk", "baseline", "ddim_eta=1.0", ACT2
    ),
    "batch64": trained("batch 64 instead of 256: more updates per minute of training", "train.batch_size=64"),
    "batch64_act4": eval_only("batch 64, executing 4 actions per chunk", "batch64", ACT4),
    "flow": trained(
        "flow matching (policy=flow: the same U-Net, 10 Euler steps) instead of diffusion", "policy=flow"
    ),
    "flow_act2": eval_only("flow matching, executing 2 actions per chunk", "flow", ACT2),
    "obs_noise_0.03": trained(
        "Gaussian noise of std 0.03 (normalized units) on the low-dim observations in training",
        "policy.obs_noise=0.03",
    ),
    "obs_noise_0.03_act2": eval_only(
        "observation noise 0.03, executing 2 actions per chunk", "obs_noise_0.03", ACT2
    ),
    "all_demos": trained(
        "train on all 100 demos (data.val_fraction=0: no 10 held out for the validation loss)",
        "data.val_fraction=0",
    ),
    "all_demos_act2": eval_only("all 100 demos, executing 2 actions per chunk", "all_demos", ACT2),
    "all_demos_act2_inf20": eval_only(
        "all 100 demos, executing 2 actions per chunk, with 20 DDIM steps instead of 10 (eval inference_steps)",
        "all_demos",
        ACT2,
        "inference_steps=20",
    ),
    "all_demos_h8": trained(
        "all 100 demos, predicting 8-action chunks instead of 16 (policy.horizon=8; executes 4 by default)",
        "data.val_fraction=0",
        "policy.horizon=8",
        "policy.n_action_steps=4",
    ),
    "all_demos_h8_act4": eval_only(f"{H8} 4", "all_demos_h8", ACT4),
    "all_demos_h8_act2": eval_only(f"{H8} 2", "all_demos_h8", ACT2),
    "all_demos_h8_act1": eval_only(f"{H8} 1 (a new chunk every step)", "all_demos_h8", "n_action_steps=1"),
    "all_demos_h8_act2_inf20": eval_only(
        f"{H8} 2, with 20 DDIM steps instead of 10 (eval inference_steps)",
        "all_demos_h8",
        ACT2,
        "inference_steps=20",
    ),
    "all_demos_h8_act2_inf50": eval_only(
        f"{H8} 2, with 50 DDIM steps (eval inference_steps)", "all_demos_h8", ACT2, "inference_steps=50"
    ),
    "all_demos_h8_act2_ddpm": eval_only(
        f"{H8} 2, sampled with DDPM (all 100 training steps)", "all_demos_h8", ACT2, "sampler=ddpm"
    ),
    "all_demos_h4": trained(
        "all 100 demos, predicting 4-action chunks instead of 16 (policy.horizon=4; executes 2 by default)",
        "data.val_fraction=0",
        "policy.horizon=4",
        "policy.n_action_steps=2",
    ),
    "all_demos_h4_act2_inf20": eval_only(
        "all 100 demos, 4-action chunks, executing 2, with 20 DDIM steps (eval inference_steps)",
        "all_demos_h4",
        ACT2,
        "inference_steps=20",
    ),
    # finetune=fs at the base's own budget: the same recipe and seed, with one loop round's intervention
    # steps added to the demos (windows drawn uniformly; the round's policy, pre-intervention and
    # drive-back recovery steps weigh 0, as RaC and HG-DAgger weigh them in the loop)
    "fs_round": trained(
        "the base recipe from scratch on the demos plus a round's interventions (--round-store)",
        "data.extra_paths=[ROUND_STORE]",
        "+data.sample_weights={policy: 0.0, pre_intervention: 0.0, recovery: 0.0}",
        "data.sample_weight_mode=sample",
    ),
    # fs_round's control: the same stores, split, normalizer data and windows, the corrections at weight 0
    # too, so that only whether the corrections are trained on differs from fs_round
    "fs_round_zero": trained(
        "fs_round with the round's corrections at weight 0 as well (fs_round's control)",
        "data.extra_paths=[ROUND_STORE]",
        "+data.sample_weights={policy: 0.0, pre_intervention: 0.0, recovery: 0.0, correction: 0.0}",
        "data.sample_weight_mode=sample",
    ),
}
