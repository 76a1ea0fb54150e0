"""MetricsLogger: local JSONL always, W&B offline run folder when enabled, no network."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rewind.config import ConfigError
from rewind.metrics import MetricsLogger, read_metrics


@pytest.fixture
def no_network_env(monkeypatch: Any) -> None:
    """Point every W&B endpoint and proxy at a closed local port, and keep wandb quiet."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)


def _png(path: Path) -> Path:
    import imageio.v3 as iio

    iio.imwrite(path, np.zeros((8, 8, 3), dtype=np.uint8))
    return path


def test_disabled_writes_jsonl_only(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, mode="disabled") as metrics:
        assert metrics.wandb_run is None
        metrics.log({"loss": np.float32(0.5), "n": np.int64(3)})
        metrics.log({"loss": 0.25}, step=10)
        metrics.log({"loss": 0.125})
        metrics.log_table("episodes", [{"id": 0, "ok": True}, {"id": 1, "len": 7}])
        metrics.log_image("frame", _png(tmp_path / "f.png"))
        metrics.summary({"success_rate": 0.75})
    assert not (tmp_path / "wandb").exists()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["kind"] for r in records] == ["log", "log", "log", "table", "image", "summary"]
    assert [r["step"] for r in records] == [0, 10, 11, 12, 13, None]
    assert records[0]["loss"] == 0.5 and records[0]["n"] == 3
    assert all(isinstance(r["wall_time"], float) for r in records)
    assert read_metrics(tmp_path, kind="summary") == [records[-1]]


def test_disabled_does_not_import_wandb(tmp_path: Path) -> None:
    code = (
        "import sys; from rewind.metrics import MetricsLogger; "
        f"MetricsLogger({str(tmp_path)!r}, mode='disabled').close(); print('wandb' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "False"


def test_jsonl_is_flushed_per_line_and_appends(tmp_path: Path) -> None:
    metrics = MetricsLogger(tmp_path, mode="disabled")
    metrics.log({"a": 1})
    assert len(read_metrics(tmp_path)) == 1  # readable before close
    metrics.close()
    metrics.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        metrics.log({"a": 2})
    with MetricsLogger(tmp_path, mode="disabled") as again:
        again.log({"a": 3})
    assert [r["a"] for r in read_metrics(tmp_path)] == [1, 3]


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="offline, online, disabled"):
        MetricsLogger(tmp_path, mode="cloud")
    with MetricsLogger(tmp_path, mode="disabled") as metrics:
        with pytest.raises(ValueError, match="reserved"):
            metrics.log({"step": 1})
        with pytest.raises(FileNotFoundError):
            metrics.log_video("v", tmp_path / "missing.mp4")


def test_offline_writes_a_wandb_run_folder(tmp_path: Path, no_network_env: None) -> None:
    config = {"lr": np.float32(1e-3), "task": "lift", "path": tmp_path}
    with MetricsLogger(tmp_path, mode="offline", config=config, group="g", system_stats=False) as metrics:
        run = metrics.wandb_run
        assert run is not None and run.settings.mode == "offline"
        metrics.log({"train/loss": 0.5}, step=1)
        metrics.log_table("rollouts", [{"ep": 0, "success": True}])
        metrics.log_image("frame", _png(tmp_path / "f.png"))
        metrics.summary({"success_rate": 1.0})
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb"))
    assert len(read_metrics(tmp_path)) == 4
