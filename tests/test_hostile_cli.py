"""Hostile command lines against every console script: each user error is one line on stderr, exit 2.

The matrix covers every entry of ``[project.scripts]``: an unknown key, a wrong type for an int key,
an unknown config-group option, malformed overrides (``foo==``, ``=x``), an unknown flag, a missing
required value and a nonexistent input path. Most cases run in this process through the console
script's own entry point (``main()`` with ``sys.argv`` set, exactly what the installed script does);
one case per script runs as a real subprocess of the installed script (``.venv/bin/rewind-...``).
Every case must fail before the command does any work: no out_dir is left behind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
MISSING_PATH = "/nonexistent/rewind-hostile"


def _group(name: str, valid: str) -> tuple[list[str], list[str]]:
    """An unknown option of the config group ``name``; the error must list ``valid`` among the options."""
    return [f"{name}=nope"], [f"{name}=nope: unknown {name}; valid:", valid]


# Per console script: (an unknown key, an int key, a config-group override that names no option
# and one valid option of that group, the command line that lacks a required value and the key it
# names, a nonexistent input path and the key it names). None: the command has no such thing
# (rewind-collect and rewind-loop have no required value; rewind-collect reads no input path;
# rewind-store has no int key and no config group, so its `cmd` choice stands in for the group).
COMMANDS: dict[str, dict[str, Any]] = {
    "rewind-collect": {
        "unknown_key": "epsiodes",
        "int_key": "episodes",
        "group": _group("env", "pick_place"),
        "missing": None,
        "path": None,
    },
    "rewind-store": {
        "unknown_key": "pth",
        "int_key": None,
        "group": (["bogus", str(ROOT)], ["cmd must be one of info, ", "got 'bogus'"]),
        "missing": (["info"], "path"),
        "path": (["info", MISSING_PATH], "path"),
    },
    "rewind-train": {
        "unknown_key": "train.stpes",
        "int_key": "train.steps",
        "group": _group("policy", "diffusion"),
        "missing": ([], "data.path"),
        "path": ([f"data.path={MISSING_PATH}"], "data.path"),
    },
    "rewind-eval": {
        "unknown_key": "episdoes",
        "int_key": "num_envs",
        "group": _group("perturb", "nudge"),
        "missing": ([], "policy_path"),
        "path": ([f"policy_path={MISSING_PATH}"], "policy_path"),
    },
    "rewind-teleop": {
        "unknown_key": "prot",
        "int_key": "port",
        "group": _group("env", "stack3"),
        "missing": ([], "store"),
        "path": (["store=STORE", "policy_path=WEIGHTS", f"calibration={MISSING_PATH}"], "calibration"),
    },
    "rewind-calibrate": {
        "unknown_key": "monitor.alhpa",
        "int_key": "max_demos",
        "group": _group("monitor", "tide"),
        "missing": ([f"policy_path={ROOT}"], "data_path"),
        "path": ([f"policy_path={ROOT}", f"data_path={MISSING_PATH}"], "data_path"),
    },
    "rewind-monitor-eval": {
        "unknown_key": "detector",
        "int_key": "operator_budget",
        "group": _group("monitor", "stac"),
        "missing": ([f"data_path={ROOT}"], "policy_path"),
        "path": ([f"policy_path={MISSING_PATH}", f"data_path={ROOT}"], "policy_path"),
    },
    "rewind-loop": {
        "unknown_key": "rouns",
        "int_key": "rounds",
        "group": _group("recovery", "dagger"),
        "missing": None,
        "path": ([f"base.policy_path={MISSING_PATH}"], "base.policy_path"),
    },
}

# One real subprocess per console script, each a different kind of case.
SUBPROCESS_CASE = {
    "rewind-collect": "group",
    "rewind-store": "path",
    "rewind-train": "malformed_eq",
    "rewind-eval": "int",
    "rewind-teleop": "path",
    "rewind-calibrate": "missing",
    "rewind-monitor-eval": "unknown_key",
    "rewind-loop": "malformed_key",
}


def _case(command: str, kind: str, tmp: Path) -> tuple[list[str], list[str]] | None:
    """``(arguments, substrings the error line must contain)`` for one case, or None if not applicable."""
    spec = COMMANDS[command]
    if kind == "unknown_key":
        return [f"{spec['unknown_key']}=1"], [f"unknown key '{spec['unknown_key']}'", "valid:"]
    if kind == "int":
        key = spec["int_key"]
        return None if key is None else ([f"{key}=abc"], [f"{key}=abc", "Integer"])
    if kind == "group":
        return spec["group"]
    if kind == "malformed_eq":
        return ["foo=="], ["malformed override 'foo=='"]
    if kind == "malformed_key":
        return ["=x"], ["malformed override '=x'", "no key"]
    if kind == "flag":
        return ["--nope"], ["unknown option '--nope'"]
    if spec[kind] is None:
        return None
    args, key = spec[kind]
    store, weights = tmp / "store", tmp / "weights"
    weights.mkdir(exist_ok=True)
    args = [a.replace("STORE", str(store)).replace("WEIGHTS", str(weights)) for a in args]
    if kind == "missing":
        return args, [f"missing required value '{key}'"]
    return args, [f"{key} does not exist: {MISSING_PATH}"]


KINDS = ("unknown_key", "int", "group", "malformed_eq", "malformed_key", "flag", "missing", "path")


def _applies(command: str, kind: str) -> bool:
    """False where ``COMMANDS`` says the command has no such case (None)."""
    return COMMANDS[command].get("int_key" if kind == "int" else kind, "") is not None


MATRIX = [(command, kind) for command in COMMANDS for kind in KINDS if _applies(command, kind)]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RWD_DEBUG", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def test_matrix_covers_every_console_script() -> None:
    assert set(COMMANDS) == set(SCRIPTS)
    assert set(SUBPROCESS_CASE) == set(SCRIPTS)


@pytest.fixture(scope="module")
def entry_point_mains() -> dict[str, Any]:
    """Each console script's function, loaded the way the installed script loads it (imported up
    front, so import-time output is not mistaken for the command's)."""
    found = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.name in SCRIPTS}
    assert set(found) == set(SCRIPTS), "pip install -e . to register the console scripts"
    for name, ep in found.items():
        assert ep.value == SCRIPTS[name]
    return {name: ep.load() for name, ep in found.items()}


def _assert_one_line_error(command: str, code: int, out: str, err: str, expected: list[str]) -> None:
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith(f"{command}: error: "), lines[0]
    for part in expected:
        assert part in lines[0]
    assert out == ""


@pytest.mark.parametrize(("command", "kind"), MATRIX, ids=[f"{c}-{k}" for c, k in MATRIX])
def test_user_error_is_one_line_exit_2(
    command: str,
    kind: str,
    entry_point_mains: dict[str, Any],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = _case(command, kind, tmp_path)
    assert case is not None
    args, expected = case
    out_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [command, *args, f"out_dir={out_dir}"])
    with pytest.raises(SystemExit) as exc:
        entry_point_mains[command]()
    captured = capfd.readouterr()
    _assert_one_line_error(command, exc.value.code, captured.out, captured.err, expected)
    assert not out_dir.exists()  # failed before doing anything
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("command", sorted(SUBPROCESS_CASE))
def test_installed_script_reports_one_line(command: str, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / command
    exe = str(script) if script.exists() else shutil.which(command)
    if exe is None:
        pytest.skip(f"{command} is not installed")
    case = _case(command, SUBPROCESS_CASE[command], tmp_path)
    assert case is not None
    args, expected = case
    out_dir = tmp_path / "run"
    proc = subprocess.run(
        [exe, *args, f"out_dir={out_dir}"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    _assert_one_line_error(command, proc.returncode, proc.stdout, proc.stderr, expected)
    assert not out_dir.exists()
