"""What a recovery round fine-tunes on: the round stores of its pool, their per-source sample weights,
the optional label-conflict filter (:mod:`rewind.loop.label_conflict`), and the training config of
the round (and of its control arm) with the data entries of the round's record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewind.loop import stages
from rewind.loop.config import LoopConfig
from rewind.loop.label_conflict import FilterOutcome, filter_rounds
from rewind.loop.lineage import abs_path, rel, round_dir
from rewind.loop.obs_range import round_obs_range
from rewind.loop.record import RoundRecord
from rewind.loop.sources import source_class
from rewind.policies.io import read_policy_meta
from rewind.train import DataConfig, TrainConfig
from rewind.train.config import InitConfig


def train_sample_weights(cfg: LoopConfig) -> dict[str, float]:
    """The recovery source's default sample weights per source updated with ``finetune.sample_weights``."""
    return {**source_class(cfg.recovery.name).train_sample_weights, **cfg.finetune.sample_weights}


def round_stores(
    cfg: LoopConfig, out: Path, r: int
) -> tuple[dict[int, Path], dict[int, dict[str, Any]], dict[int, int]]:
    """The round stores round ``r`` trains on, their counts and their steps of non-zero sample weight."""
    sample_weights = train_sample_weights(cfg)
    rounds = range(1, r + 1) if cfg.finetune.all_rounds else [r]
    stores = {q: round_dir(out, q) / "collect" / "store" for q in rounds}
    counts = {q: stages.store_counts(p) for q, p in stores.items() if p.exists()}
    useful = {
        q: sum(n for src, n in c["source_counts"].items() if sample_weights.get(src, 1.0) > 0)
        for q, c in counts.items()
    }
    return stores, counts, {q: n for q, n in useful.items() if n > 0}


def conflict_filter(
    cfg: LoopConfig,
    out: Path,
    r: int,
    records: list[RoundRecord],
    t: dict[str, float],
    hook: stages.StageHook | None,
) -> FilterOutcome | None:
    """With ``finetune.conflict_filter.enabled``: score round ``r``'s training pool with the deployed
    policy's encoder into ``round_RR/conflict_filter``, timed as ``conflict_filter``."""
    if not cfg.finetune.conflict_filter.enabled:
        return None
    stores, _, useful = round_stores(cfg, out, r)
    with stages.timed(t, "conflict_filter", hook, r):
        return filter_rounds(
            cfg.finetune.conflict_filter,
            cfg.env,
            abs_path(out, records[-1].policy.weights),
            abs_path(out, records[0].demos or ""),
            {q: stores[q] for q in useful},
            round_dir(out, r) / "conflict_filter",
            train_sample_weights(cfg),
            cfg.device,
        )


def _init(cfg: LoopConfig, out: Path, records: list[RoundRecord], control: bool) -> dict[str, Any]:
    """The ``init`` node of a fine-tuning: from the parent's weights (``ft``), or from scratch keeping
    the base's normalizer (``normalizer=keep``), or empty."""
    f, base, prev = cfg.finetune, records[0], records[-1]
    parent = prev.policy.weights
    if control and prev.control:
        parent = prev.control.policy.weights
    if f.mode == "ft":
        return {"from_weights": str(abs_path(out, parent)), "normalizer": f.normalizer}
    if f.normalizer == "keep":
        return {"from_weights": str(abs_path(out, base.policy.weights)), "load_weights": False}
    return {}


def finetune_config(
    cfg: LoopConfig,
    out: Path,
    r: int,
    records: list[RoundRecord],
    folder: Path,
    control: bool = False,
    filt: FilterOutcome | None = None,
) -> tuple[TrainConfig, dict[str, Any], dict[str, Any]]:
    """Round ``r``'s fine-tuning (``control``: the same on the demos alone) in ``folder`` (``filt``:
    without the steps the conflict filter dropped), the ``init`` entry of its record and the data it
    sees (for the record)."""
    f, base = cfg.finetune, records[0]
    stores, counts, useful = round_stores(cfg, out, r)
    if filt is not None and not control:
        useful = {q: n - filt.dropped.get(q, 0) for q, n in useful.items() if n > filt.dropped.get(q, 0)}
    used = [] if control else list(useful)
    mix = stages.mix_shares(f.demo_share, [useful[q] for q in used], f.max_passes, f.steps * f.batch_size)
    meta = read_policy_meta(abs_path(out, base.policy.weights))
    data = DataConfig(
        path=str(abs_path(out, base.demos)),
        extra_paths=[str(stores[q]) for q in used],
        mix=mix,
        val_fraction=0.0,
        sample_weights=train_sample_weights(cfg),
        sample_weight_mode=f.sample_weight_mode,
        drop_steps_paths=[None, *[filt.drop_files.get(q) for q in used]] if filt and used else [],
    )
    init = _init(cfg, out, records, control)
    tcfg = stages.train_config(
        cfg,
        folder,
        data,
        {"name": meta["policy_type"], **meta["config"]},
        cfg.seed + r,
        stages.optim_config(f.steps, f.batch_size, f.lr, f.warmup_steps),
        InitConfig(**init),
    )
    seen = {
        "demos": base.data["demos"],
        "rounds": {str(q): counts[q] for q in used},
        "mix": mix,
        "sample_weights": data.sample_weights,
    }
    if filt is not None and not control:
        seen["conflict_filter"] = filt.record
    if used and f.normalizer == "keep":
        weights = abs_path(out, base.policy.weights)
        seen["obs_range"] = round_obs_range(weights, {q: stores[q] for q in used}, data.sample_weights, r)
    return tcfg, init, seen


def finetune_record(cfg: LoopConfig, out: Path, init: dict[str, Any]) -> dict[str, Any]:
    """The ``finetune`` entry of a round's record (``init``'s weights path made relative to ``out``)."""
    if init:
        init["from_weights"] = rel(out, init["from_weights"])
    return {
        "mode": cfg.finetune.mode,
        "steps": cfg.finetune.steps,
        "init": init or None,
        "sample_weights": dict(cfg.finetune.sample_weights),
    }
