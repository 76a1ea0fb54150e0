"""rewind.utils: atomic writes, seeding, run provenance, logging setup."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from rewind.utils.io import atomic_save_figure, atomic_write_json, atomic_write_text, private_opener
from rewind.utils.logging import setup_logging
from rewind.utils.run_info import code_root, git_revision, redact_argv, redact_config, run_info
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


def test_a_figure_that_fails_to_render_leaves_the_last_plot(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dest = tmp_path / "plot.png"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    atomic_save_figure(dest, fig)
    good = dest.read_bytes()
    assert good.startswith(b"\x89PNG\r\n\x1a\n")
    ax.set_title(r"$\notacommand{x}$")  # mathtext that cannot be parsed: savefig raises
    with pytest.raises(ValueError):
        atomic_save_figure(dest, fig)
    plt.close(fig)
    assert dest.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    assert atomic_save_figure(tmp_path / "plot.pdf", fig).read_bytes().startswith(b"%PDF")
    plt.close(fig)


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


def test_redact_config_hides_token_values_only() -> None:
    cfg = {
        "token": "s3cret",
        "host": "0.0.0.0",
        "nested": {"token": "x", "tokens": 3, "items": [{"token": "y"}, 1]},
        "empty": {"token": None},
        "blank": {"token": ""},
    }
    assert redact_config(cfg) == {
        "token": "***",
        "host": "0.0.0.0",
        "nested": {"token": "***", "tokens": 3, "items": [{"token": "***"}, 1]},
        "empty": {"token": None},
        "blank": {"token": ""},
    }
    assert cfg["token"] == "s3cret"  # a copy; the input is untouched
    plain = {"episodes": 3, "env": {"name": "lift"}, "paths": ["a", "b"]}
    assert redact_config(plain) == plain


def test_redact_argv_and_run_info_hide_the_token() -> None:
    argv = ["prog", "token=abc", "+token=abc", "++teleop.token='a b'", "token=", "tokens=1", "mytoken=2"]
    assert redact_argv([*argv, "--cfg", "job"]) == [
        "prog",
        "token=***",
        "+token=***",
        "++teleop.token=***",
        "token=",
        "tokens=1",
        "mytoken=2",
        "--cfg",
        "job",
    ]
    info = run_info(["prog", "host=0.0.0.0", "token=s3cret"])
    assert "s3cret" not in json.dumps(info)
    assert info["command_line"] == "prog host=0.0.0.0 'token=***'"


def test_written_files_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, under which open() makes files world-readable
    try:
        atomic_write_json(tmp_path / "a.json", {"x": 1})
        with open(tmp_path / "new.log", "a", encoding="utf-8", opener=private_opener) as fh:
            fh.write("x\n")
        (tmp_path / "old.log").write_text("old\n")
        with open(tmp_path / "old.log", "a", encoding="utf-8", opener=private_opener) as fh:
            fh.write("more\n")
        setup_logging("INFO", log_file=tmp_path / "run.log")
        logging.getLogger("rewind.test").info("hello")
        setup_logging()
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"a.json": 0o600, "new.log": 0o600, "old.log": 0o600, "run.log": 0o600}
    assert (tmp_path / "old.log").read_text() == "old\nmore\n"
    assert "hello" in (tmp_path / "run.log").read_text()
