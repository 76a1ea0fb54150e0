"""Round records: typed, a JSON round trip, a schema version; a round.json written before the version
field existed (tests/loop/data/*_v1.json, from the default loop run on main before issue 15) loads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rewind.config import ConfigError
from rewind.loop.lineage import RECORD, load_record, mark_done, round_dir
from rewind.loop.record import SCHEMA_VERSION, RoundRecord, WaitingForHuman
from rewind.loop.report import round_row

DATA = Path(__file__).resolve().parent / "data"
OLD = {r: json.loads((DATA / f"round_{r:02d}_v1.json").read_text()) for r in (0, 1)}


@pytest.mark.parametrize("r", [0, 1])
def test_a_version_1_round_json_loads_and_writes_back_the_same_fields(r: int) -> None:
    assert "schema_version" not in OLD[r]
    rec = RoundRecord.from_json(OLD[r])
    assert rec.round == r and rec.schema_version == SCHEMA_VERSION
    written = rec.to_json()
    assert written == {**OLD[r], "schema_version": SCHEMA_VERSION}
    assert list(written)[1:] == list(OLD[r])  # same key order after the version
    assert RoundRecord.from_json(json.loads(json.dumps(written))) == rec


def test_typed_fields_of_an_old_record() -> None:
    base, r1 = RoundRecord.from_json(OLD[0]), RoundRecord.from_json(OLD[1])
    assert base.policy.parent is None and r1.policy.parent == base.policy.version
    assert base.eval.success_rate == 0.33 and r1.eval.success_rate == 0.38
    assert r1.control is not None and r1.control.eval.success_rate == 0.43
    assert r1.control.policy.parent == base.policy.version
    assert r1.calibration.calibrated and r1.calibration.folder == "round_01/calibration"
    assert r1.operator_steps.total == base.operator_steps.demos + r1.operator_steps.round
    assert base.finetune is None and base.collection is None and base.control is None


def test_report_rows_of_old_records() -> None:
    rows = [round_row(RoundRecord.from_json(OLD[r])) for r in (0, 1)]
    assert [r["success_rate"] for r in rows] == [0.33, 0.38]
    assert rows[1]["control_success"] == 0.43 and rows[0]["control_success"] is None
    assert rows[1]["interventions"] == 49 and rows[1]["episodes_kept"] == 46
    assert rows[0]["alpha_used"] == 0.2 and rows[1]["success_with_rewind"] is None


def test_lineage_writes_and_reads_typed_records(tmp_path: Path) -> None:
    rec = RoundRecord.from_json(OLD[1])
    assert load_record(tmp_path, 1) is None
    mark_done(tmp_path, 1, rec)
    assert json.loads((round_dir(tmp_path, 1) / RECORD).read_text())["schema_version"] == SCHEMA_VERSION
    assert load_record(tmp_path, 1) == rec


def test_an_uncalibrated_round_round_trips() -> None:
    node = {
        **OLD[0],
        "calibration": {
            "episodes": 3,
            "successes": 0,
            "alpha_requested": 0.2,
            "calibrated": False,
            "reason": "no successful rollout",
        },
    }
    rec = RoundRecord.from_json(node)
    assert rec.calibration.alpha is None and rec.calibration.reason == "no successful rollout"
    assert rec.to_json()["calibration"] == node["calibration"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"schema_version": SCHEMA_VERSION + 1}, "schema_version 3 is not one this version reads"),
        ({"surprise": 1}, "unknown keys ['surprise']"),
        ({"eval": {"episodes": 1}}, "eval: "),
        ({"control": {"policy": {}}}, "control: expected the keys eval, policy"),
    ],
)
def test_bad_records_are_refused_naming_the_problem(change: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        RoundRecord.from_json({**OLD[1], **change}, "round_01/round.json")


def test_waiting_for_human_is_a_type_not_a_status_string() -> None:
    w = WaitingForHuman(have=1, need=3, command="rewind-teleop env=lift")
    assert dataclasses.asdict(w) == {"have": 1, "need": 3, "command": "rewind-teleop env=lift"}
