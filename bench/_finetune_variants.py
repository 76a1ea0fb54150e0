"""The variants of ``bench/finetune_ablation.py``: one round's fine-tuning on Stack3 with one setting
changed each (Hydra overrides of ``rewind-train``), and the round store each trains on."""

from __future__ import annotations

#: the issue-5 experiment's Stack3 folder (its 200-demo store is one variant's round store)
ROOT = "runs/loop_experiment/stack3"
#: name -> (what it changes, extra rewind-train overrides, the round store or None for the default).
VARIANTS: dict[str, tuple[str, list[str], str | None]] = {
    "as_loop": (
        "the loop's recipe before 2026-12-04: 20% demos, 80% the intervention segments, drive-back "
        "recovery included (policy steps at weight 0); corrections_only is RaC's default since then",
        [],
        None,
    ),
    "control": ("demos only (the loop's control arm)", ["data.extra_paths=[]"], None),
    "new_demos": (
        "20% demos, 80% the 200-demo store (100 more demos) instead of the round",
        [],
        f"{ROOT}/demos_200/store",
    ),
    "demo_share_50": ("50% demos", ["data.mix=[0.5,0.5]"], None),
    "demo_share_80": ("80% demos", ["data.mix=[0.8,0.2]"], None),
    "demo_share_95": ("95% demos", ["data.mix=[0.95,0.05]"], None),
    "lr_1e-4": ("learning rate 1e-4 instead of 3e-4", ["train.lr=1e-4"], None),
    "all_labels": (
        "every label weight 1 (the policy's own steps too)",
        ["+data.sample_weights={policy: 1.0, pre_intervention: 1.0}"],
        None,
    ),
    "mask_zero_weight": (
        "only the operator's actions supervised (data.mask_zero_sample_weight)",
        ["data.mask_zero_sample_weight=true"],
        None,
    ),
    "obs_clip_5": ("observations clipped at 5 (policy.obs_clip)", ["policy.obs_clip=5.0"], None),
    "obs_clip_1.5": ("observations clipped at 1.5", ["policy.obs_clip=1.5"], None),
    "own_successes": (
        "80% the base policy's own successful rollouts (plain rewind-eval, seeds 50000..) instead",
        ["+data.sample_weights={policy: 1.0}"],
        "OWN",
    ),
    # issue 12: repetition controls, the passes cap, the stage split
    "demos_matched": (
        "80% new demos (seeds 1000..) cut to the round's correction steps: its repetition",
        ["+data.sample_weights={policy: 1.0}"],
        "MATCHED_DEMOS",
    ),
    "own_matched": (
        "80% own successful rollouts cut to the round's correction steps",
        ["+data.sample_weights={policy: 1.0}"],
        "MATCHED_OWN",
    ),
    "max_passes_4": (
        "the round's share capped at 4 expected passes over its steps (finetune.max_passes=4)",
        ["data.mix=MAX_PASSES_4"],
        None,
    ),
    "late_stages": (
        "only the corrections made after green was grasped (the first stage's become weight 0)",
        [],
        "LATE",
    ),
    "as_loop_respect": (
        "as_loop with data.source_boundaries=respect",
        ["data.source_boundaries=respect"],
        None,
    ),
    "max_passes_4_respect": (
        "max_passes_4 with data.source_boundaries=respect",
        ["data.mix=MAX_PASSES_4", "data.source_boundaries=respect"],
        None,
    ),
    "late_stages_respect": (
        "late_stages with data.source_boundaries=respect",
        ["data.source_boundaries=respect"],
        "LATE",
    ),
    # issue 12 on robosuite Can (RaC rounds: correction + drive-back "recovery" segments)
    "corrections_only": (
        "as_loop on the correction segments only (the drive-back recovery segments at weight 0)",
        ["+data.sample_weights={policy: 0.0, pre_intervention: 0.0, recovery: 0.0}"],
        None,
    ),
    "recovery_only": (
        "as_loop on the drive-back recovery segments only (the corrections at weight 0)",
        ["+data.sample_weights={policy: 0.0, pre_intervention: 0.0, correction: 0.0}"],
        None,
    ),
    "conflict_filtered": (
        "as_loop without the steps the label-conflict filter drops (--drop-steps: a loop's "
        "round_RR/conflict_filter/round_QQ.json)",
        ["data.drop_steps_paths=DROP"],
        None,
    ),
    "as_loop_pinned": (
        "as_loop's weights, evaluated with the near-constant observation channels pinned to the "
        "demo centre (no training)",
        [],
        "PINNED",
    ),
}
