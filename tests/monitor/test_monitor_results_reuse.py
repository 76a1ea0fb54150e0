"""bench/monitor_results.py ``--reuse-from``: a step another root finished is linked only when it ran
the same command (its root swapped), on unchanged policy weights, with the same calibration folder.
The finished step is a real ``rewind-eval`` run of the tiny policy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def reuse_step():
    """``reuse_step`` of bench/_commands.py (bench/ is not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        from _commands import reuse_step
    finally:
        sys.path.remove(str(BENCH))
    return reuse_step


def _eval_cmd(train: Path, root: Path, step: str, seed: int = 5, extra: tuple[str, ...] = ()) -> list[str]:
    """The command monitor_results runs for ``root/lift/step`` (plain evaluation, one short episode)."""
    bin_ = str(Path(sys.executable).with_name("rewind-eval"))
    return [
        bin_,
        f"policy_path={train}",
        "env=lift",
        "env.max_steps=12",
        "progress=false",
        "episodes=1",
        f"seed={seed}",
        "perturb=none",
        "wandb.mode=offline",
        *extra,
        f"out_dir={root / 'lift' / step}",
    ]


@pytest.fixture(scope="module")
def finished(tiny_run, tmp_path_factory) -> dict[str, Path]:
    """A copy of the tiny policy's weights and a source root whose ``lift/base_none`` finished."""
    tmp = tmp_path_factory.mktemp("reuse")
    train = shutil.copytree(tiny_run["train"], tmp / "train")
    src = tmp / "src"
    subprocess.run(_eval_cmd(train, src, "base_none"), check=True, capture_output=True, cwd=tmp)
    return {"train": train, "src": src, "tmp": tmp}


def _monitored_copy(src: Path, step: str) -> None:
    """``src/lift/step``: the finished run, recorded as if it had also named ``src/lift/cal``."""
    shutil.copytree(src / "lift" / "base_none", src / "lift" / step)
    run = json.loads((src / "lift" / step / "run.json").read_text())
    run["argv"] = [*run["argv"][:-1], f"monitor.calibration={src / 'lift' / 'cal'}", run["argv"][-1]]
    run["argv"][-1] = run["argv"][-1].replace("base_none", step)
    run["out_dir"] = str(src / "lift" / step)
    (src / "lift" / step / "run.json").write_text(json.dumps(run))


def test_the_same_command_on_the_same_weights_is_linked(finished, reuse_step) -> None:
    train, src, tmp = finished["train"], finished["src"], finished["tmp"]
    dst = tmp / "dst_same"
    folder = dst / "lift" / "base_none"
    assert reuse_step(_eval_cmd(train, dst, "base_none"), folder, dst, src)
    assert folder.is_symlink() and folder.resolve() == (src / "lift" / "base_none").resolve()
    assert json.loads((folder / "summary.json").read_text())["seed"] == 5
    # a second call leaves the link alone
    assert not reuse_step(_eval_cmd(train, dst, "base_none"), folder, dst, src)


def test_another_command_is_not_linked(finished, reuse_step) -> None:
    train, src, tmp = finished["train"], finished["src"], finished["tmp"]
    dst = tmp / "dst_other"
    folder = dst / "lift" / "base_none"
    assert not reuse_step(_eval_cmd(train, dst, "base_none", seed=6), folder, dst, src)
    assert not reuse_step(_eval_cmd(train, dst, "base_none", extra=("ddim_eta=1.0",)), folder, dst, src)
    assert not folder.exists() and not folder.is_symlink()


def test_a_monitored_step_needs_the_same_calibration_folder(finished, reuse_step) -> None:
    train, src, tmp = finished["train"], finished["src"], finished["tmp"]
    (src / "lift" / "cal").mkdir(exist_ok=True)
    _monitored_copy(src, "norewind_none")
    for name, linked in (("dst_cal_own", False), ("dst_cal_linked", True)):
        dst = tmp / name
        (dst / "lift").mkdir(parents=True)
        if linked:
            (dst / "lift" / "cal").symlink_to(src / "lift" / "cal", target_is_directory=True)
        else:
            (dst / "lift" / "cal").mkdir()  # a calibration of its own
        cmd = _eval_cmd(train, dst, "norewind_none", extra=(f"monitor.calibration={dst / 'lift' / 'cal'}",))
        assert reuse_step(cmd, dst / "lift" / "norewind_none", dst, src) is linked


def test_changed_weights_are_not_reused(finished, reuse_step, tmp_path) -> None:
    train, src = finished["train"], finished["src"]
    src_copy = shutil.copytree(src, tmp_path / "src", symlinks=True)
    train_copy = shutil.copytree(train, tmp_path / "train")
    # the copied root's run used the copied weights, and wrote to the copied root
    run_json = src_copy / "lift" / "base_none" / "run.json"
    run = json.loads(run_json.read_text())
    run["argv"] = [
        a.replace(str(train), str(train_copy)).replace(str(src), str(src_copy)) for a in run["argv"]
    ]
    run["out_dir"] = str(src_copy / "lift" / "base_none")
    run_json.write_text(json.dumps(run))
    summary_json = src_copy / "lift" / "base_none" / "summary.json"
    summary = json.loads(summary_json.read_text())
    summary["policy_path"] = summary["policy_path"].replace(str(train), str(train_copy))
    summary_json.write_text(json.dumps(summary))
    before = tmp_path / "dst_before"
    assert reuse_step(
        _eval_cmd(train_copy, before, "base_none"), before / "lift" / "base_none", before, src_copy
    )
    dst = tmp_path / "dst"
    cmd = _eval_cmd(train_copy, dst, "base_none")
    weights = next((train_copy / "weights").glob("step_*/model.safetensors"))
    for path in (train_copy / "weights").glob("step_*/model.safetensors"):
        tensors = load_file(path)
        save_file({k: v + 1.0 if v.is_floating_point() else v for k, v in tensors.items()}, path)
    assert weights.exists()
    assert not reuse_step(cmd, dst / "lift" / "base_none", dst, src_copy)
    assert not (dst / "lift" / "base_none").is_symlink()
