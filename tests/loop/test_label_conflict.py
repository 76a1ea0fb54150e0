"""The label-conflict filter (``finetune.conflict_filter``): corrections that repeat what the demos do
are kept, corrections far from every nearby demo action are dropped; the loop records the counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.loop import loop_config
from helpers.train import run_cli

from rewind.envs.config import EnvConfig
from rewind.loop import run_loop
from rewind.loop.label_conflict import ConflictFilterConfig, filter_rounds
from rewind.loop.lineage import RECORD, round_dir
from rewind.store import ReplayStore
from rewind.store.windows import read_drop_steps
from rewind.train.policy_api import resolve_weights


def _round_store(demos: Path, out: Path) -> tuple[Path, set[int], set[int]]:
    """Every demo twice as ``correction`` steps: once with the demo's own actions, once with actions
    far off (+5 in every dimension); returns the store and the ids of the copies and of the far ones."""
    copies, far = set(), set()
    with ReplayStore.open(demos) as src, ReplayStore.create(out, src.spec) as dst:
        for info in src.episodes():
            ep = src.load(info.id)
            labels = ["correction"] * len(ep.actions)
            copies.add(dst.add_episode(ep.obs, ep.actions, ep.states, labels).id)
            far.add(dst.add_episode(ep.obs, ep.actions + 5.0, ep.states, labels).id)
    return out, copies, far


def test_far_corrections_are_dropped_and_copies_kept(tmp_path: Path, tiny_run) -> None:
    store, copies, far = _round_store(tiny_run["store"], tmp_path / "round")
    fc = ConflictFilterConfig(enabled=True, k=5)
    out = filter_rounds(
        fc, EnvConfig(name="lift"), tiny_run["train"], tiny_run["store"], {1: store}, tmp_path / "f"
    )
    dropped = read_drop_steps(out.drop_files[1])
    assert set(dropped) == far  # no copied step is dropped
    with ReplayStore.open(store) as s:
        lengths = {i.id: i.length for i in s.episodes()}
    assert all(sorted(dropped[e]) == list(range(lengths[e])) for e in far)  # every far step is
    rec = out.record
    assert rec["threshold"] > 0 and rec["sources"] == ["correction", "recovery", "human"]
    assert rec["dropped"] == out.dropped[1] == sum(lengths[e] for e in far)
    assert rec["kept"] == sum(lengths[e] for e in copies)
    assert rec["rounds"]["1"]["by_source"] == {"correction": {"kept": rec["kept"], "dropped": rec["dropped"]}}
    by_stage = rec["rounds"]["1"]["by_stage"]
    assert sum(v["dropped"] for v in by_stage.values()) == rec["dropped"] and "unknown" not in by_stage
    assert json.loads((tmp_path / "f" / "summary.json").read_text()) == rec


def test_loop_with_the_filter_records_what_it_kept_and_dropped(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "filtered"
    summary = run_loop(loop_config(out, tiny_run, rounds=1, finetune={"conflict_filter": {"enabled": True}}))
    rec = json.loads((round_dir(out, 1) / RECORD).read_text())
    filt = rec["data"]["conflict_filter"]
    weights_of = rec["data"]["sample_weights"]  # only trained-on operator steps are scored
    assert weights_of.get("recovery") == 0.0  # RaC's default: the drive back is stored, not trained on
    n_scored = sum(
        n
        for src, n in rec["collection"]["source_counts"].items()
        if src in ("correction", "recovery") and weights_of.get(src, 1.0) > 0
    )
    assert n_scored > 0 and filt["kept"] + filt["dropped"] == n_scored
    assert filt["rounds"]["1"]["scored"] == n_scored and "conflict_filter" in rec["timings_s"]
    drop_file = round_dir(out, 1) / "conflict_filter" / filt["rounds"]["1"]["file"]
    assert sum(len(v) for v in read_drop_steps(drop_file).values()) == filt["dropped"]
    weights = resolve_weights(str(round_dir(out, 1) / "train"))  # the round's candidate, promoted or not
    meta = json.loads((weights / "config.json").read_text())["extra"]["config"]
    assert meta["data"]["drop_steps_paths"] == [None, str(drop_file)]  # the round trained without them
    row = summary["rounds"][1]
    assert (row["conflict_kept"], row["conflict_dropped"]) == (filt["kept"], filt["dropped"])
    assert "conflict_kept" not in summary["rounds"][0]
    assert "conflict filter:" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            "finetune.conflict_filter.quantile=1.0",
            "finetune.conflict_filter.quantile must be in (0, 1); got 1.0",
        ),
        (
            "finetune.conflict_filter.quantile=0",
            "finetune.conflict_filter.quantile must be in (0, 1); got 0.0",
        ),
        ("finetune.conflict_filter.k=0", "finetune.conflict_filter.k must be >= 1; got 0"),
    ],
)
def test_bad_filter_values_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture, bad: str, message: str
) -> None:
    from rewind.scripts.loop import main

    assert run_cli(main, [f"out_dir={tmp_path / 'bad'}", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and "Traceback" not in err and len(err.splitlines()) == 1


def test_the_filter_is_off_by_default() -> None:
    assert not ConflictFilterConfig().enabled
    assert np.isclose(ConflictFilterConfig().quantile, 0.95)


def test_bench_script_counts_only_the_labels_asked_for(tmp_path: Path, tiny_run) -> None:
    """bench/label_conflict.py --labels: the steps it checks are those of the named labels alone."""
    script = Path(__file__).resolve().parents[2] / "bench" / "label_conflict.py"
    store = tmp_path / "round"
    lengths = {"correction": 0, "recovery": 0}
    with ReplayStore.open(tiny_run["store"]) as src, ReplayStore.create(store, src.spec) as dst:
        for i, info in enumerate(src.episodes()):
            ep = src.load(info.id)
            label = "correction" if i % 2 else "recovery"
            dst.add_episode(ep.obs, ep.actions, ep.states, [label] * len(ep.actions))
            lengths[label] += len(ep.actions)
    counts = {}
    for labels in (["correction"], ["correction", "recovery"]):
        out = tmp_path / f"{'_'.join(labels)}.json"
        cmd = [
            sys.executable,
            str(script),
            "--task",
            "lift",
            "--weights",
            str(tiny_run["train"]),
            "--demos",
            str(tiny_run["store"]),
            "--round-store",
            str(store),
            "--k",
            "3",
            "--threads",
            "1",
            "--labels",
            *labels,
            "--out",
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        counts[tuple(labels)] = json.loads(out.read_text())["all_steps"]
    assert counts[("correction",)] == lengths["correction"] > 0
    assert counts[("correction", "recovery")] == lengths["correction"] + lengths["recovery"]
