"""The command framework (rewind.cli.app) with a throwaway command, plus the real rewind-store checks."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import MISSING

from rewind.cli.app import format_summary, hydra_command, is_user_error
from rewind.cli.argv import check_flags, map_positional, parse_overrides, quote_override_value, split_flags
from rewind.config import CommandConfig, ConfigError, check_input_paths, require, to_dataclass
from rewind.metrics import MetricsLogger


@dataclass
class ToyConfig(CommandConfig):
    """Schema of the throwaway command."""

    name: str = MISSING
    episodes: int = 2
    scale: float = 1.0
    crash: str = "no"
    data_path: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        require(self.episodes >= 1, f"episodes must be >= 1; got {self.episodes}")


CALLS: list[ToyConfig] = []


@pytest.fixture
def toy(tmp_path: Path) -> Any:
    """A command `rewind-toy NAME key=val` whose YAML lives in a temporary config folder."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "toy.yaml").write_text("defaults:\n  - toy_schema\n  - _self_\n\nscale: 0.5\n")
    CALLS.clear()

    @hydra_command(config_name="toy", positional=("name",), config_path=str(conf))
    def main(cfg: ToyConfig) -> dict[str, Any]:
        """Toy command used by the tests."""
        CALLS.append(cfg)
        if cfg.crash == "bug":
            raise RuntimeError("internal bug")
        if cfg.crash == "user":
            raise ConfigError("name: no such thing")
        with MetricsLogger(cfg.out_dir, mode="disabled") as metrics:
            metrics.log({"episodes": cfg.episodes}, step=0)
        return {"name": cfg.name, "episodes": cfg.episodes, "scale": cfg.scale}

    return main


def _run(main: Any, *args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_overrides_reach_typed_config_and_outputs_are_written(toy: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _run(toy, "alpha", "episodes=3", f"out_dir={out}") == 0
    (cfg,) = CALLS
    assert isinstance(cfg, ToyConfig)
    assert (cfg.name, cfg.episodes, cfg.scale, cfg.out_dir) == ("alpha", 3, 0.5, str(out.resolve()))
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"name": "alpha", "episodes": 3, "scale": 0.5}
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["episodes"] == 3 and saved["out_dir"] == str(out.resolve())
    info = json.loads((out / "run.json").read_text())
    for key in ("git_revision", "git_dirty", "command_line", "start_time", "hostname", "duration_s"):
        assert key in info
    assert set(info["versions"]) >= {"rewind", "torch", "mujoco"}
    assert "episodes=3" in info["command_line"] and "alpha" in info["command_line"]
    assert (out / "run.log").is_file()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no .hydra, no temp files


def test_default_out_dir_is_runs_command_timestamp(toy: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run(toy, "beta") == 0
    (run_dir,) = (tmp_path / "runs" / "toy").iterdir()
    assert (run_dir / "summary.json").is_file()
    assert not (tmp_path / "outputs").exists()


def test_misspelled_key_fails_at_start(toy: Any, tmp_path: Path, capsys: Any) -> None:
    assert _run(toy, "a", "epsiodes=3", f"out_dir={tmp_path / 'r'}") == 2
    assert capsys.readouterr().err == (
        "rewind-toy: error: unknown key 'epsiodes' (did you mean 'episodes'?); "
        "valid: out_dir, name, episodes, scale, crash, data_path, token\n"
    )
    assert CALLS == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("episodes=abc", "episodes=abc: Value 'abc' of type 'str' could not be converted to Integer"),
        ("foo==", "malformed override 'foo=='"),
        ("=x", "malformed override '=x': no key before '='"),
        ("--nope", "unknown option '--nope'"),
        ("--cfg=nope", "argument --cfg/-c: invalid choice: 'nope'"),
    ],
)
def test_hydra_errors_are_one_line_exit_2(
    toy: Any, tmp_path: Path, capsys: Any, arg: str, message: str
) -> None:
    assert _run(toy, "a", arg, f"out_dir={tmp_path / 'r'}") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rewind-toy: error: {message}") and err.count("\n") == 1
    assert CALLS == [] and not (tmp_path / "r").exists()


def test_missing_input_path_fails_before_the_command(toy: Any, tmp_path: Path, capsys: Any) -> None:
    assert _run(toy, "a", f"data_path={tmp_path / 'nope'}", f"out_dir={tmp_path / 'r'}") == 2
    assert capsys.readouterr().err == f"rewind-toy: error: data_path does not exist: {tmp_path / 'nope'}\n"
    assert CALLS == [] and not (tmp_path / "r").exists()  # the empty run folder is removed again
    assert _run(toy, "a", f"data_path={tmp_path}", f"out_dir={tmp_path / 'r'}") == 0


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a plain open() makes files world-readable."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


RUN_FILES = ("config.yaml", "run.json", "run.log", "summary.json", "metrics.jsonl")


def test_run_files_are_private(toy: Any, tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "new" / "run"
    assert _run(toy, "a", f"out_dir={out}") == 0
    assert _mode(out) == 0o700 and _mode(out.parent) == 0o755  # only the out_dir itself
    assert {name: _mode(out / name) for name in RUN_FILES} == dict.fromkeys(RUN_FILES, 0o600)
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "run.log").write_text("earlier run\n")
    assert _mode(existing / "run.log") == 0o644
    assert _run(toy, "a", f"out_dir={existing}") == 0
    assert _mode(existing) == 0o755  # not created by the command: left alone
    assert {name: _mode(existing / name) for name in RUN_FILES} == dict.fromkeys(RUN_FILES, 0o600)
    assert (existing / "run.log").read_text().startswith("earlier run\n")


def test_token_is_not_written(toy: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _run(toy, "a", "token=s3cr3t-value", f"out_dir={out}") == 0
    assert CALLS[0].token == "s3cr3t-value"  # the command itself gets the value
    assert yaml.safe_load((out / "config.yaml").read_text())["token"] == "***"
    info = json.loads((out / "run.json").read_text())
    assert "token=***" in info["command_line"] and "token=***" in info["argv"]
    for path in out.iterdir():
        assert "s3cr3t" not in path.read_text(), path.name


def test_validation_error_is_one_line_exit_2(toy: Any, tmp_path: Path, capsys: Any) -> None:
    assert _run(toy, "a", "episodes=0", f"out_dir={tmp_path / 'r'}") == 2
    err = capsys.readouterr().err
    assert "rewind-toy: error: episodes must be >= 1; got 0" in err
    assert "Traceback" not in err


def test_missing_value_and_extra_words_exit_2(toy: Any, tmp_path: Path, capsys: Any) -> None:
    assert _run(toy, f"out_dir={tmp_path / 'r'}") == 2
    assert "missing required value 'name'" in capsys.readouterr().err
    assert _run(toy, "a", "b") == 2
    assert "unexpected argument(s): b" in capsys.readouterr().err


def test_user_error_in_command_exit_2_and_debug_shows_traceback(
    toy: Any, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    assert _run(toy, "a", "crash=user", f"out_dir={tmp_path / 'r'}") == 2
    assert capsys.readouterr().err.strip().endswith("rewind-toy: error: name: no such thing")
    assert not (tmp_path / "r" / "summary.json").exists()
    monkeypatch.setenv("RWD_DEBUG", "1")
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError, match="no such thing"):
        toy(["a", "crash=user", f"out_dir={tmp_path / 'r2'}"])


@pytest.mark.parametrize("crash", ["no", "user"])
def test_a_secondary_torchrun_rank_never_creates_out_dir(
    toy: Any, tmp_path: Path, monkeypatch: Any, crash: str
) -> None:
    """Rank 1 of 2 runs the command with rank 0's out_dir but leaves creating it to rank 0, so a rank
    that torchrun stops after rank 0's config error cannot leave an empty run folder behind."""
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    toy_args = ["a", f"crash={crash}", f"out_dir={out}"]
    if crash == "no":  # the toy logs through MetricsLogger, which needs its folder (rank 0 makes it)
        out.mkdir()
    assert _run(toy, *toy_args) == (2 if crash == "user" else 0)
    assert CALLS[0].out_dir == str(out.absolute())
    assert out.exists() == (crash == "no")
    assert not (out / "run.json").exists() and not (out / "config.yaml").exists()
    assert list(scratch_root.iterdir()) == []  # Hydra's scratch run dir is removed


def test_bug_keeps_its_traceback(toy: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(RuntimeError, match="internal bug"):
        toy(["a", "crash=bug", f"out_dir={tmp_path / 'r'}"])


def test_multirun_gives_each_job_its_own_out_dir(toy: Any, tmp_path: Path, umask_022: None) -> None:
    out = tmp_path / "sweep"
    assert _run(toy, "a", "-m", "episodes=1,2", f"out_dir={out}") == 0
    assert [json.loads((out / n / "summary.json").read_text())["episodes"] for n in "01"] == [1, 2]
    assert [_mode(out), _mode(out / "0"), _mode(out / "1")] == [0o700] * 3


def test_cfg_job_prints_config_without_running(toy: Any, capsys: Any) -> None:
    assert _run(toy, "gamma", "--cfg", "job") == 0
    assert "name: gamma" in capsys.readouterr().out
    assert CALLS == []


def test_argv_is_restored(toy: Any, tmp_path: Path) -> None:
    before = list(sys.argv)
    _run(toy, "a", f"out_dir={tmp_path / 'r'}")
    assert sys.argv == before


@pytest.mark.parametrize("value", ["/tmp/a b,c", "it's", "x=y", "C:\\dir\\", "[1,2]", "a\\'b", "~/x:y"])
def test_quoted_values_survive_hydra_parsing(value: str) -> None:
    (override,) = OverridesParser.create().parse_overrides([f"k={quote_override_value(value)}"])
    assert override.value() == value


def test_map_positional_skips_flags_and_overrides() -> None:
    args = ["info", "--cfg", "job", "-i", "config", "~x", "+y=1", "/p"]
    assert map_positional(args, ("cmd", "path")) == [
        "cmd='info'",
        "--cfg",
        "job",
        "-i",
        "config",
        "~x",
        "+y=1",
        "path='/p'",
    ]
    assert split_flags(["a=1", "-m", "b=2", "--cfg", "job"]) == (["-m", "--cfg", "job"], ["a=1", "b=2"])
    with pytest.raises(ConfigError, match="given twice"):
        map_positional(["info", "cmd=export"], ("cmd",))
    with pytest.raises(ConfigError, match="unexpected argument"):
        map_positional(["a"], ())


def test_flags_and_overrides_are_checked_before_hydra() -> None:
    check_flags(["-m", "--cfg", "job", "--info", "config"])
    with pytest.raises(ConfigError, match="unknown option '--nope'"):
        check_flags(["--nope"])
    parsed = parse_overrides(["a.b=1", "+c=[1,2]", "~d", "e='x=y'"])
    assert [o.key_or_group for o in parsed] == ["a.b", "c", "d", "e"] and parsed[3].value() == "x=y"
    for bad in ("foo==", "=x", "a=[1", "+=1"):
        with pytest.raises(ConfigError, match="malformed override"):
            parse_overrides([bad])


@dataclass
class _Inner:
    calibration: str | None = None
    extra_paths: list[str] | None = None
    out: str = "/nonexistent/output/is/fine"


@dataclass
class _Paths:
    policy_path: str | None = None
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_check_input_paths_names_the_missing_one(tmp_path: Path) -> None:
    check_input_paths(_Paths(policy_path=str(tmp_path), inner=_Inner(extra_paths=[str(tmp_path)])))
    with pytest.raises(ConfigError, match="^policy_path does not exist: /nope$"):
        check_input_paths(_Paths(policy_path="/nope"))
    with pytest.raises(ConfigError, match="^inner.extra_paths does not exist: /nope2$"):
        check_input_paths(_Paths(inner=_Inner(extra_paths=[str(tmp_path), "/nope2"])))
    with pytest.raises(ConfigError, match="^inner.calibration does not exist"):
        check_input_paths(_Paths(inner=_Inner(calibration="/nope3")))


def test_to_dataclass_errors_name_the_field() -> None:
    assert to_dataclass({"name": "n", "out_dir": "o"}, ToyConfig).episodes == 2
    with pytest.raises(ConfigError, match="episodes must be >= 1; got 0"):
        to_dataclass({"name": "n", "out_dir": "o", "episodes": 0}, ToyConfig)
    with pytest.raises(ConfigError, match="episodes"):
        to_dataclass({"name": "n", "out_dir": "o", "episodes": "many"}, ToyConfig)
    with pytest.raises(ConfigError, match="'nmae'"):
        to_dataclass({"nmae": "n", "out_dir": "o"}, ToyConfig)


def test_is_user_error_and_format_summary() -> None:
    class LocalError(ValueError):
        pass

    assert is_user_error(ConfigError("x")) and is_user_error(FileNotFoundError("x"))
    assert not is_user_error(ValueError("x")) and not is_user_error(LocalError("x"))
    assert format_summary({"a": 0.123456, "b": [1], "c": "ok"}) == "a=0.1235, c=ok"


def _store(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rewind.scripts.store", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_store_command_validates_its_arguments(tmp_path: Path) -> None:
    proc = _store("bogus", str(tmp_path), f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    expected = "rewind-store: error: cmd must be one of info, export, import, verify; got 'bogus'"
    assert proc.stderr.strip() == expected
    from rewind.scripts.store import main

    assert _run(main, "export", str(tmp_path), f"out_dir={tmp_path / 'r'}") == 2
    assert _run(main, "info", "a", "b") == 2


def test_store_info_on_missing_store_is_a_user_error(tmp_path: Path, capsys: Any) -> None:
    from rewind.scripts.store import main

    assert _run(main, "info", str(tmp_path / "nope"), f"out_dir={tmp_path / 'r'}") == 2
    assert "rewind-store: error:" in capsys.readouterr().err


def test_real_command_writes_private_files_and_its_config_unchanged(
    tmp_path: Path, capsys: Any, umask_022: None
) -> None:
    """rewind-collect (no secret in its config): config.yaml is exactly the resolved config Hydra shows."""
    from rewind.scripts.collect import main

    out = tmp_path / "collect"
    args = ["episodes=2", "progress=false", f"out_dir={out}"]
    assert _run(main, *args, "--cfg", "job") == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert _run(main, *args) == 0
    assert yaml.safe_load((out / "config.yaml").read_text()) == shown
    assert _mode(out) == 0o700
    for name in ("config.yaml", "run.json", "run.log", "summary.json"):
        assert _mode(out / name) == 0o600, name
    assert json.loads((out / "summary.json").read_text())["episodes"] == 2
