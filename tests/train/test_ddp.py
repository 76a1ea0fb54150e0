"""``rewind-train`` under ``torchrun`` with 2 CPU processes (gloo): the same weights as one process with
the same global batch, an exact resume after a SIGKILL of every process, rank 0 the only writer, and a
global batch that does not divide as a one-line error (exit status 2)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.train import TINY_TRAIN, train_args, train_config
from safetensors.torch import load_file

from rewind.metrics import read_metrics
from rewind.train import run_train
from rewind.train.state import STATE_DIR, WEIGHTS_DIR, read_pointer, step_name

STEPS = 60
#: A run that saves every 2 steps (the resumable changes: save_every, val_every, log_every).
SAVE_OFTEN = ["train.save_every=2", "train.val_every=0", "train.log_every=2"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _torchrun(run: Path, store: Path, logs: Path, *extra: str) -> subprocess.Popen:
    """``python -m torch.distributed.run --nproc_per_node=2 -m rewind.scripts.train ...`` (each rank's
    stdout/stderr in ``logs``), started in its own session."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    launcher += [
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        f"--log-dir={logs}",
        "--redirects=3",
    ]
    args = [a for a in train_args(run, store) if not a.startswith("train.steps")]
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "rewind.scripts.train", *args, f"train.steps={STEPS}", *extra]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


def _finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(errors="replace")


def _rank_stderr(logs: Path) -> dict[int, str]:
    """Each local rank's redirected stderr (``LOG_DIR/<run id>/attempt_0/<rank>/stderr.log``)."""
    return {int(p.parent.name): p.read_text() for p in logs.glob("*/attempt_*/*/stderr.log")}


def _tensors(run: Path, step: int) -> dict[str, torch.Tensor]:
    """The raw weights of the training state and the saved (EMA) policy weights at ``step``."""
    raw = load_file(str(run / STATE_DIR / step_name(step) / "model.safetensors"))
    ema = load_file(str(run / WEIGHTS_DIR / step_name(step) / "model.safetensors"))
    return {**{f"raw.{k}": v for k, v in raw.items()}, **{f"ema.{k}": v for k, v in ema.items()}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, tiny_run: dict[str, Path]) -> dict[str, Path]:
    """The session's 4-demo store and an uninterrupted 2-process run of STEPS steps on it."""
    root = tmp_path_factory.mktemp("ddp")
    store = tiny_run["store"]
    code, out = _finish(_torchrun(root / "run", store, root / "logs"))
    assert code == 0, out[-3000:]
    return {"store": store, "run": root / "run", "logs": root / "logs"}


def test_two_processes_match_one_process_with_the_global_batch(
    reference: dict[str, Path], tmp_path: Path
) -> None:
    # one process, global batch 8 as 2 micro-batches of 4 with the noise streams of ranks 0 and 1
    train = {**TINY_TRAIN, "steps": STEPS}
    summary = run_train(train_config(tmp_path / "one", reference["store"], train=train), micro_batches=2)
    assert summary["steps"] == STEPS and "processes" not in summary
    one, two = _tensors(tmp_path / "one", STEPS), _tensors(reference["run"], STEPS)
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    losses = [r["train/loss"] for r in read_metrics(tmp_path / "one", "log") if "train/loss" in r]
    ddp_losses = [r["train/loss"] for r in read_metrics(reference["run"], "log") if "train/loss" in r]
    assert losses == pytest.approx(ddp_losses, rel=1e-5)  # the logged loss is the mean over ranks


def test_only_rank_zero_writes(reference: dict[str, Path]) -> None:
    run = reference["run"]
    names = {p.name for p in run.iterdir()}
    assert names == {
        "config.yaml",
        "run.json",
        "run.log",
        "summary.json",
        "metrics.jsonl",
        WEIGHTS_DIR,
        STATE_DIR,
    }
    steps = [r["step"] for r in read_metrics(run, "log") if "train/loss" in r]
    assert steps == sorted(set(steps)) and steps[-1] == STEPS  # no duplicate metric lines
    assert len(read_metrics(run, "summary")) == 1
    assert run.joinpath("run.log").read_text().count("training diffusion") == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == STEPS
    stderr = _rank_stderr(reference["logs"])
    assert sorted(stderr) == [0, 1]
    assert " I rewind." in stderr[0]
    assert not [line for line in stderr[1].splitlines() if " I rewind." in line or " W rewind." in line]


def _children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        kids += [int(k) for k in text.split()]
    return kids


def test_sigkill_of_every_process_then_resume_matches_an_uninterrupted_run(
    reference: dict[str, Path], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    proc = _torchrun(run, reference["store"], tmp_path / "logs", *SAVE_OFTEN)
    pointer = run / STATE_DIR / "last.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if pointer.is_file() and json.loads(pointer.read_text())["step"] >= 6:
                break
            time.sleep(0.02)
        workers = _children(proc.pid)
        for pid in [proc.pid, *workers]:  # the launcher and both ranks, at once
            os.kill(pid, signal.SIGKILL)
    finally:
        _finish(proc)
    saved = read_pointer(run / STATE_DIR)
    assert saved is not None and 6 <= saved < STEPS, f"killed at {saved}"
    for pid in workers:
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
                break
            time.sleep(0.05)
    code, out = _finish(_torchrun(run, reference["store"], tmp_path / "logs2", *SAVE_OFTEN, "resume=true"))
    assert code == 0, out[-3000:]
    resumed, uninterrupted = _tensors(run, STEPS), _tensors(reference["run"], STEPS)
    for name in uninterrupted:
        assert torch.equal(resumed[name], uninterrupted[name]), name


def test_a_global_batch_that_does_not_divide_is_a_one_line_error(
    reference: dict[str, Path], tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    code, out = _finish(_torchrun(tmp_path / "run", reference["store"], logs, "train.batch_size=7"))
    assert code != 0  # torchrun's own status; each rank exits 2
    assert "exitcode  : 2" in out or "exitcode: 2" in out, out[-2000:]
    error = (
        "rewind-train: error: train.batch_size=7 is the global batch and must be divisible by the number "
        "of processes (WORLD_SIZE=2); use a multiple of 2, e.g. 8"
    )
    printed = {
        rank: [line for line in text.splitlines() if line.strip() and "Warning" not in line]
        for rank, text in _rank_stderr(logs).items()
    }
    # The first rank to exit makes torchrun's agent stop the other one, which may not have reached the
    # check yet: each rank printed the one line or nothing, and at least one printed it.
    assert sorted(printed) == [0, 1], printed
    assert all(lines in ([error], []) for lines in printed.values()), printed
    assert [error] in printed.values(), printed
    assert not (tmp_path / "run").exists()  # nothing written
