"""A full disk while a run saves policy weights or training state, or appends to ``metrics.jsonl``.

Where the test may mount a small tmpfs (root in a container that allows it), the disk really fills up;
elsewhere the refusal is simulated half way through the write, as ``tests/loop/test_full_disk.py`` does.
Each refusal is one line naming what was not written, and what was saved before is intact."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rewind.cli.app import is_user_error
from rewind.metrics import MetricsLogger, read_metrics
from rewind.train.state import TMP_PREFIX, atomic_dir
from rewind.utils.io import DiskFullError, is_disk_full


@contextlib.contextmanager
def tiny_disk(tmp_path: Path, size: str = "96k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted under ``tmp_path`` (skips the test where mounting is not allowed)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _save(folder: Path, n: int, value: float) -> None:
    with atomic_dir(folder) as tmp:
        save_file({"w": torch.full((n,), value)}, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps({"n": n}))


def test_a_weights_folder_the_disk_cannot_hold_leaves_the_previous_save(tmp_path: Path) -> None:
    with tiny_disk(tmp_path) as disk:
        final = disk / "weights" / "step_000500"
        _save(final, 1000, 1.0)  # 4 kB: fits
        with pytest.raises(DiskFullError) as info:
            _save(final, 100_000, 2.0)  # 400 kB: does not
        assert str(info.value).startswith(f"{final} was not written (")
        assert str(info.value).endswith("its previous content is intact")
        assert is_user_error(info.value)
        assert torch.equal(load_file(final / "model.safetensors")["w"], torch.full((1000,), 1.0))
        assert not [p for p in final.parent.iterdir() if p.name.startswith(TMP_PREFIX)]


def test_a_refused_first_save_leaves_no_folder(tmp_path: Path) -> None:
    final = tmp_path / "training_state" / "step_000100"
    with pytest.raises(DiskFullError) as info, atomic_dir(final) as tmp:
        (tmp / "state.json").write_text("{}")
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert str(info.value) == f"{final} was not written (Disk quota exceeded); no partial file was left"
    assert list(final.parent.iterdir()) == []


def test_other_errors_inside_a_save_are_not_called_a_full_disk(tmp_path: Path) -> None:
    with pytest.raises(PermissionError), atomic_dir(tmp_path / "w") as _:
        raise PermissionError(errno.EACCES, "denied")
    assert not is_disk_full(RuntimeError("shape mismatch (os error 2)"))
    assert is_disk_full(RuntimeError("I/O error: No space left on device (os error 28)"))


def test_metrics_jsonl_never_keeps_a_partial_line(tmp_path: Path, monkeypatch) -> None:
    logger = MetricsLogger(tmp_path, mode="disabled")
    logger.log({"loss": 1.0}, step=0)
    real_write = logger._fh.write

    def half_then_full(data: memoryview) -> int:
        real_write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(logger._fh, "write", half_then_full, raising=False)
    with pytest.raises(DiskFullError) as info:
        logger.log({"loss": 0.5, "note": "x" * 200}, step=1)
    monkeypatch.undo()
    assert str(info.value) == (
        f"{logger.path}: a metrics record was not written (No space left on device); the records before "
        "it are intact"
    )
    assert [r["loss"] for r in read_metrics(tmp_path)] == [1.0]
    logger.log({"loss": 0.25}, step=2)  # room again: the file goes on from a whole line
    logger.close()
    assert [r["loss"] for r in read_metrics(tmp_path)] == [1.0, 0.25]


def test_metrics_on_a_really_full_disk(tmp_path: Path) -> None:
    with tiny_disk(tmp_path, size="16k") as disk:
        logger = MetricsLogger(disk / "run", mode="disabled")
        logged = 0
        with pytest.raises(DiskFullError):
            for step in range(10_000):
                logger.log({"loss": 1.0 / (step + 1), "pad": "p" * 100}, step=step)
                logged += 1
        logger.close()
        records = read_metrics(disk / "run")  # every line whole
        assert [r["step"] for r in records] == list(range(logged)) and logged > 10
