"""A full disk (or an exhausted quota) while the loop writes its files, simulated as
``tests/store/test_store_full_disk.py`` does: the temporary file's writer raises ENOSPC / EDQUOT half way
through. Each refused write is one line naming the file; no temporary file is left and the file keeps what
it held before. A round whose ``round.json`` was refused stays not done, and is marked done once there is
room again."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rewind.cli.app import is_user_error
from rewind.loop.lineage import RECORD, load_record, mark_done, round_dir
from rewind.loop.record import RoundRecord
from rewind.loop.report import PLOT_COST, PLOT_ROUNDS, REPORT, write_report
from rewind.utils import io as io_module
from rewind.utils.io import DiskFullError, atomic_write_json

DATA = Path(__file__).resolve().parent / "data"
RECORDS = [RoundRecord.from_json(json.loads((DATA / f"round_{r:02d}_v1.json").read_text())) for r in (0, 1)]
REAL_WRITE = io_module._write_synced


def _full_half_way(code: int) -> Callable[[Any, bytes], None]:
    """A writer that gets half of the data onto the disk, then finds no room for the rest."""

    def write(fh: Any, data: bytes) -> None:
        REAL_WRITE(fh, data[: len(data) // 2])
        raise OSError(code, os.strerror(code))

    return write


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_refused_round_json_leaves_the_round_not_done(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(io_module, "_write_synced", _full_half_way(errno.ENOSPC))
    with pytest.raises(DiskFullError) as info:
        mark_done(tmp_path, 1, RECORDS[1])
    monkeypatch.undo()
    path = round_dir(tmp_path, 1) / RECORD
    assert str(info.value) == (
        f"{path} was not written (No space left on device); no partial file was left; round 1 is not "
        "done: free some space and run the loop again (same out_dir) to redo it"
    )
    assert is_user_error(info.value)  # the command reports it in one line, exit status 2
    assert load_record(tmp_path, 1) is None and _files(round_dir(tmp_path, 1)) == {}
    mark_done(tmp_path, 1, RECORDS[1])  # room again
    assert load_record(tmp_path, 1) == RECORDS[1]


@pytest.mark.parametrize(
    ("code", "reason"), [(errno.ENOSPC, "No space left on device"), (errno.EDQUOT, "Disk quota exceeded")]
)
def test_refused_summary_and_report_keep_what_they_held(
    tmp_path: Path, monkeypatch, code: int, reason: str
) -> None:
    cfg = SimpleNamespace(
        env=SimpleNamespace(name="pickplace"),
        recovery=SimpleNamespace(name="operator"),
        finetune=SimpleNamespace(mode="full"),
    )
    atomic_write_json(tmp_path / "summary.json", {"rounds": 1})
    write_report(tmp_path, RECORDS[:1], cfg)
    before = _files(tmp_path)
    assert set(before) == {"summary.json", REPORT, PLOT_COST, PLOT_ROUNDS}
    monkeypatch.setattr(io_module, "_write_synced", _full_half_way(code))
    with pytest.raises(DiskFullError) as summary_info:
        atomic_write_json(tmp_path / "summary.json", {"rounds": 2})
    with pytest.raises(DiskFullError) as report_info:
        write_report(tmp_path, RECORDS, cfg)
    monkeypatch.undo()
    assert str(summary_info.value) == (
        f"{tmp_path / 'summary.json'} was not written ({reason}); its previous content is intact"
    )
    assert str(report_info.value).startswith(f"{tmp_path / PLOT_COST} was not written ({reason})")
    assert _files(tmp_path) == before  # byte for byte, and no temporary file beside them
    write_report(tmp_path, RECORDS, cfg)  # room again: the report is redrawn
    assert "| 1 |" in (tmp_path / REPORT).read_text()
