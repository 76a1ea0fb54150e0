"""The promotion gate (``promotion.rule=not_worse``): what a round deploys, records and fine-tunes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.loop import loop_config, loop_node

from rewind.config import ConfigError, to_dataclass
from rewind.loop import LoopConfig, promotion, run_loop
from rewind.loop.lineage import RECORD, round_dir
from rewind.loop.record import EvalOutcome, RoundRecord


def _rec(out: Path, r: int) -> dict:
    return json.loads((round_dir(out, r) / RECORD).read_text())


def _gated(out: Path, base: dict[str, Path], **kw: object) -> LoopConfig:
    return loop_config(
        out, base, control=True, promotion={"rule": "not_worse", "episodes": 2, "seed": 777, **kw}
    )


def test_gate_promotes_a_candidate_that_is_not_worse_and_records_it(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "gated"
    run_loop(_gated(out, tiny_run, tolerance=0.0))  # the tiny policy: 0% everywhere, so 0 >= 0 - 0
    base, r1, r2 = (_rec(out, r) for r in range(3))
    assert base["selection"]["episodes"] == 2 and "promotion" not in base
    summary = json.loads((round_dir(out, 0) / "selection" / "summary.json").read_text())
    assert [rec["seed"] for rec in summary["records"]] == [777, 778]  # the selection seeds, not eval's
    for prev, rec in ((base, r1), (r1, r2)):
        gate = rec["promotion"]
        assert gate["promoted"] and gate["rule"] == "not_worse" and "candidate_eval" not in gate
        assert gate["candidate"] == rec["policy"] and rec["policy"]["parent"] == prev["policy"]["version"]
        assert (
            gate["deployed_selection"] == prev["selection"]
            and rec["selection"] == gate["candidate_selection"]
        )
        assert rec["control"]["promotion"]["promoted"]
    assert RoundRecord.from_json(r2).to_json() == r2  # the new fields survive a JSON round trip


def test_gate_keeps_the_deployed_weights_when_the_candidate_is_worse(
    tmp_path: Path, tiny_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Selection results are pinned (the tiny policy never succeeds) so that every candidate is worse
    than the base: the base stays deployed, and each round fine-tunes from it on all rounds' data."""
    real = promotion.select

    def pinned(cfg, weights, folder):  # noqa: ANN001, ANN202
        ev = real(cfg, weights, folder)
        rate = 0.5 if folder.parent.name == "round_00" else 0.0
        return EvalOutcome(
            ev.episodes, int(rate * ev.episodes), rate, [0.0, 1.0], ev.max_stage_histogram, 1.0
        )

    monkeypatch.setattr(promotion, "select", pinned)
    out = tmp_path / "rejected"
    run_loop(_gated(out, tiny_run))
    base, r1, r2 = (_rec(out, r) for r in range(3))
    for rec in (r1, r2):
        gate = rec["promotion"]
        assert not gate["promoted"] and gate["candidate"]["version"] != base["policy"]["version"]
        assert rec["policy"] == base["policy"] and rec["eval"] == base["eval"]
        assert rec["calibration"] == base["calibration"] and rec["selection"] == base["selection"]
        assert gate["candidate_eval"]["episodes"] == base["eval"]["episodes"]
        assert (round_dir(out, rec["round"]) / "candidate_eval" / "summary.json").exists()
        assert (
            rec["finetune"]["init"]["from_weights"] == base["policy"]["weights"]
        )  # from the deployed weights
        assert rec["control"]["policy"] == base["policy"] and not rec["control"]["promotion"]["promoted"]
    assert set(r2["data"]["rounds"]) == {"1", "2"}  # a rejected round's data stays in the pool
    assert "rejected candidate" in (out / "report.md").read_text()


@pytest.mark.parametrize("floor", ["none", "base"])
def test_the_base_floor_stops_tolerances_adding_up_over_rounds(
    tmp_path: Path, tiny_run, monkeypatch: pytest.MonkeyPatch, floor: str
) -> None:
    """Selection results pinned per round (base 50%, then 46%, then 41%): each candidate is within the
    5-point tolerance of the deployed policy, so without a floor both deploy and the loop ends 9 points
    below the base; with ``floor=base`` round 2's candidate is also held to the base's 50% - 5."""
    real = promotion.select
    rates = {"round_00": 0.5, "round_01": 0.46, "round_02": 0.41, "control": 0.5}

    def pinned(cfg, weights, folder):  # noqa: ANN001, ANN202
        ev = real(cfg, weights, folder)
        rate = rates[folder.parent.name]
        return EvalOutcome(
            ev.episodes, round(rate * ev.episodes), rate, [0.0, 1.0], ev.max_stage_histogram, 1.0
        )

    monkeypatch.setattr(promotion, "select", pinned)
    out = tmp_path / floor
    run_loop(_gated(out, tiny_run, tolerance=0.05, floor=floor))
    base, r1, r2 = (_rec(out, r) for r in range(3))
    assert r1["promotion"]["promoted"] and r1["policy"] == r1["promotion"]["candidate"]
    assert r2["promotion"]["promoted"] is (floor == "none")
    assert r2["policy"] == (r2["promotion"]["candidate"] if floor == "none" else r1["policy"])
    for rec in (r1, r2):
        gate = rec["promotion"]
        if floor == "none":
            assert "floor" not in gate and "base_selection" not in gate
        else:
            assert gate["floor"] == "base" and gate["base_selection"] == base["selection"]
            assert rec["control"]["promotion"]["base_selection"] == base["selection"]
    assert RoundRecord.from_json(r2).to_json() == r2


def test_a_loop_started_before_the_gate_resumes_with_it(tmp_path: Path, tiny_run) -> None:
    """A loop started before the gate existed resumes under it: its deployed policy, which has no
    selection result, is measured on the selection seeds when the gate first needs it."""
    out = tmp_path / "switch"
    run_loop(loop_config(out, tiny_run, rounds=0, control=True, promotion={"rule": "always"}))
    assert "selection" not in _rec(out, 0)
    ident = json.loads((out / "loop.json").read_text())
    del ident["promotion"]  # as written before the gate existed
    (out / "loop.json").write_text(json.dumps(ident))
    run_loop(_gated(out, tiny_run, tolerance=0.0))
    r1 = _rec(out, 1)
    assert r1["promotion"]["deployed_selection"]["episodes"] == 2
    assert (round_dir(out, 1) / "deployed_selection" / "summary.json").exists()


def test_a_pre_gate_loop_measures_the_base_for_the_floor_once_it_needs_it(tmp_path: Path, tiny_run) -> None:
    """A loop whose round 0 and round 1 ran without the gate resumes with it: in round 2 neither the
    deployed policy (round 1's) nor the base has a selection result, so both are measured, each into
    its own folder, and the floor's reference is the base's."""
    out = tmp_path / "pre_gate"
    run_loop(loop_config(out, tiny_run, rounds=1, promotion={"rule": "always"}))
    assert "selection" not in _rec(out, 0) and "selection" not in _rec(out, 1)
    ident = json.loads((out / "loop.json").read_text())
    del ident["promotion"]  # as written before the gate existed
    (out / "loop.json").write_text(json.dumps(ident))
    run_loop(
        loop_config(out, tiny_run, rounds=2, promotion={"rule": "not_worse", "episodes": 2, "seed": 777})
    )
    gate = _rec(out, 2)["promotion"]
    assert gate["floor"] == "base" and gate["base_selection"]["episodes"] == 2
    base_run = json.loads((round_dir(out, 2) / "base_selection" / "summary.json").read_text())
    assert [rec["seed"] for rec in base_run["records"]] == [777, 778]
    assert gate["base_selection"]["successes"] == base_run["successes"]
    assert (round_dir(out, 2) / "deployed_selection" / "summary.json").exists()


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"rule": "best"}, r"promotion.rule must be one of \[always, not_worse\]"),
        ({"episodes": 0}, "promotion.episodes must be >= 1"),
        ({"tolerance": 1.5}, r"promotion.tolerance must be in \[0, 1\]"),
        ({"floor": "best"}, r"promotion.floor must be one of \[none, base\]"),
    ],
)
def test_bad_promotion_settings_are_named(tmp_path: Path, bad: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        to_dataclass(loop_node(tmp_path, promotion=bad), LoopConfig)


def test_a_resumed_loop_still_refuses_a_changed_rule(tmp_path: Path, tiny_run) -> None:
    out = tmp_path / "changed"
    run_loop(loop_config(out, tiny_run, rounds=0, promotion={"rule": "always"}))
    with pytest.raises(ConfigError, match="promotion.rule"):
        run_loop(loop_config(out, tiny_run, rounds=1))
