"""rewind.utils: atomic writes, seeding, run provenance, logging setup."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from rewind.utils.io import atomic_write_json, atomic_write_text
from rewind.utils.logging import setup_logging
from rewind.utils.run_info import code_root, git_revision, run_info
from rewind.utils.seeding import make_rng, spawn_seeds, torch_generator


def test_atomic_write_json_handles_numpy_and_leaves_no_temp(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "s.json"
    atomic_write_json(dest, {"x": np.float32(0.5), "a": np.arange(3), "p": tmp_path})
    assert json.loads(dest.read_text()) == {"x": 0.5, "a": [0, 1, 2], "p": str(tmp_path)}
    with pytest.raises(TypeError):
        atomic_write_json(dest, {"bad": object()})
    assert json.loads(dest.read_text())["x"] == 0.5  # untouched by the failed write
    atomic_write_text(dest, "new\n")
    assert dest.read_text() == "new\n"
    assert [p.name for p in dest.parent.iterdir()] == ["s.json"]


def test_seeding_is_reproducible_and_local() -> None:
    assert make_rng(3).integers(1 << 30) == make_rng(3).integers(1 << 30)
    assert spawn_seeds(7, 4) == spawn_seeds(7, 4) and len(set(spawn_seeds(7, 4))) == 4
    a = torch.rand(3, generator=torch_generator(5))
    b = torch.rand(3, generator=torch_generator(5))
    assert torch.equal(a, b)


def test_git_revision(tmp_path: Path) -> None:
    sha, dirty = git_revision()
    if (code_root() / ".git").exists():
        assert len(sha) == 40 and isinstance(dirty, bool)
    assert git_revision(tmp_path) == ("unknown", None)
    info = run_info(["prog", "a=1"])
    assert info["command_line"] == "prog a=1" and info["versions"]["rewind"] != "unknown"


def test_setup_logging_is_idempotent(tmp_path: Path) -> None:
    root = logging.getLogger()
    foreign = [h for h in root.handlers if not getattr(h, "_rewind_handler", False)]
    setup_logging("DEBUG", log_file=tmp_path / "a.log")
    setup_logging("INFO", log_file=tmp_path / "b.log")
    ours = [h for h in root.handlers if getattr(h, "_rewind_handler", False)]
    assert len(ours) == 2 and root.level == logging.INFO  # console + b.log; a.log was replaced
    assert [h for h in root.handlers if h not in ours] == foreign
    logging.getLogger("rewind.test").info("hello")
    assert "hello" in (tmp_path / "b.log").read_text() and "hello" not in (tmp_path / "a.log").read_text()
    for handler in [h for h in root.handlers if getattr(h, "_rewind_handler", False)]:
        root.removeHandler(handler)
        handler.close()
