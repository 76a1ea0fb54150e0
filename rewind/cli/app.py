"""``hydra_command``: turn a typed function into a console command with the project's conventions.

A command is a dozen lines::

    # scripts/store.py
    from rewind.cli.app import hydra_command

    @hydra_command(config_name="store", positional=("cmd", "path"))
    def main(cfg: StoreCommandConfig) -> dict:
        \"\"\"Inspect, export or import a replay store.\"\"\"
        return {...}  # the summary

``cfg``'s annotation (a dataclass deriving from :class:`rewind.config.CommandConfig`) is registered in
Hydra's ConfigStore as ``<config_name>_schema``; ``configs/<config_name>.yaml`` extends it through its
defaults list (``- store_schema`` then ``- _self_``), so a misspelled key fails at start. Every run:

* writes into ``out_dir`` (default ``runs/<config_name>/<timestamp>``; Hydra's run dir, no chdir):
  ``config.yaml`` (resolved config), ``run.json`` (provenance), ``run.log`` and, when the function
  returns, ``summary.json`` (its dict, written atomically) plus a one-line summary in the log. These
  files are readable by the owner only (0600), an out_dir the command creates is 0700, and a ``token``
  value is written as ``***`` (:func:`rewind.utils.run_info.redact_config`, ``redact_argv``);
* maps bare words to the keys in ``positional`` (``rewind-store info PATH``);
* reports user errors as one line, exit code 2: Hydra's own (unknown key or flag, wrong type, unknown
  config-group option, malformed override; :mod:`rewind.cli.errors`), a missing required value or
  input path (:func:`rewind.config.check_input_paths`; both checked before the function runs), and
  errors raised by the function (:func:`is_user_error`: :class:`~rewind.config.ConfigError`, rewind's
  own ``ValueError`` subclasses, missing files). ``RWD_DEBUG=1`` shows the traceback instead.
  Anything else is a bug and keeps its traceback (exit code 1).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import inspect
import logging
import os
import shutil
import sys
import tempfile
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from rewind.cli.argv import (
    check_flags,
    map_positional,
    override_keys,
    parse_overrides,
    quote_override_value,
    split_flags,
)
from rewind.cli.errors import HYDRA_USER_ERRORS, describe_hydra_error
from rewind.config import CommandConfig, ConfigError, check_input_paths, to_dataclass
from rewind.utils.io import atomic_write_json, atomic_write_text
from rewind.utils.logging import setup_logging
from rewind.utils.ranks import is_secondary_rank
from rewind.utils.run_info import redact_config, run_info

log = logging.getLogger(__name__)

CONFIG_PATH = "pkg://rewind.configs"
DEBUG_ENV = "RWD_DEBUG"

CommandFn = Callable[[Any], Mapping[str, Any] | None]


def hydra_command(
    config_name: str,
    positional: Sequence[str] = (),
    schema: type[CommandConfig] | None = None,
    config_path: str = CONFIG_PATH,
) -> Callable[[CommandFn], Callable[[Sequence[str] | None], None]]:
    """Decorate ``func(cfg) -> dict`` into a console entry point ``main(argv=None)``.

    Args:
        config_name: name of the YAML in ``configs/`` (also the command's ``runs/`` folder).
        positional: config keys that bare command-line words fill, in order.
        schema: root config dataclass; defaults to the annotation of ``func``'s first parameter.
        config_path: Hydra config path (tests point it at a temporary folder).
    """

    def decorate(func: CommandFn) -> Callable[[Sequence[str] | None], None]:
        cls = schema or _schema_from_signature(func)
        ConfigStore.instance().store(name=f"{config_name}_schema", node=cls)
        prog = f"rewind-{config_name.replace('_', '-')}"

        @functools.wraps(func)
        def main(argv: Sequence[str] | None = None) -> None:
            args = list(sys.argv[1:] if argv is None else argv)
            original = [sys.argv[0], *args]
            try:
                flags, overrides = split_flags(map_positional(args, positional, prog))
                check_flags(flags)
                framework = _framework_overrides(config_name, prog, func, overrides)
                fresh = _fresh_out_dir(parse_overrides([*framework, *overrides]))
            except ConfigError as exc:
                _fail(prog, exc)
            if _debug():
                os.environ.setdefault("HYDRA_FULL_ERROR", "1")
            scratch = _secondary_run_dir() if is_secondary_rank() else None
            try:
                _run_under_hydra(
                    (config_path, config_name),
                    [*flags, *framework, *_run_dir_overrides(scratch), *overrides],
                    lambda cfg: _execute(func, cls, cfg, prog, original, fresh, scratch),
                    cls,
                    prog,
                )
            finally:
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)

        main.schema = cls  # type: ignore[attr-defined]
        main.config_name = config_name  # type: ignore[attr-defined]
        return main

    return decorate


def _run_under_hydra(
    config: tuple[str, str],
    argv: list[str],
    run_task: Callable[[DictConfig], None],
    cls: type[CommandConfig],
    prog: str,
) -> None:
    """Run ``run_task`` as the Hydra task of ``config`` (path, name) with command line ``argv``.

    Hydra's user errors (bad overrides, unknown groups or options) become one-line errors naming the
    problem, or propagate with ``RWD_DEBUG=1``. Errors that the task itself reports are handled in
    ``_execute``. ``sys.argv`` and ``HYDRA_FULL_ERROR`` are restored afterwards.
    """
    hydra_main = hydra.main(version_base="1.3", config_path=config[0], config_name=config[1])
    saved_argv, saved_full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [sys.argv[0], *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; reported below
    try:
        hydra_main(run_task)()
    except HYDRA_USER_ERRORS as exc:
        if _debug():
            raise
        _fail(prog, ConfigError(describe_hydra_error(exc, cls)))
    finally:
        sys.argv = saved_argv
        _restore_env("HYDRA_FULL_ERROR", saved_full_error)


def _secondary_run_dir() -> Path:
    """An empty private folder for Hydra's run dir on a torchrun rank other than 0.

    Hydra creates its run dir before the task starts. Were it ``out_dir`` on every rank, a secondary
    rank could create it after rank 0 had removed it on a config error, and be stopped by torchrun
    before removing it itself, leaving an empty run folder behind. Rank 0 alone creates ``out_dir``.
    """
    return Path(tempfile.mkdtemp(prefix="rewind-rank-"))


def _run_dir_overrides(scratch: Path | None) -> list[str]:
    """Hydra's run and sweep dir moved to ``scratch`` (a secondary rank), or nothing (rank 0)."""
    if scratch is None:
        return []
    value = quote_override_value(str(scratch))
    return [f"hydra.run.dir={value}", f"hydra.sweep.dir={value}"]


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV) == "1"


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _fresh_out_dir(overrides: Sequence[Override]) -> Path | None:
    """The ``out_dir`` the command line asks for, when it does not exist yet (the command creates it)."""
    value = None
    for override in overrides:
        if override.key_or_group == "out_dir" and not override.is_sweep_override():
            raw = override.value()
            value = str(raw) if isinstance(raw, (str, int, float)) else None
    if not value or "${" in value or os.path.lexists(value):
        return None
    return Path(value).absolute()


def _schema_from_signature(func: Callable[..., Any]) -> type[CommandConfig]:
    """The dataclass annotating ``func``'s first parameter."""
    params = list(inspect.signature(func).parameters)
    hints = typing.get_type_hints(func)
    cls = hints.get(params[0]) if params else None
    if not (isinstance(cls, type) and issubclass(cls, CommandConfig)):
        raise TypeError(
            f"{func.__qualname__}: annotate the first parameter with a CommandConfig dataclass "
            f"or pass schema=...; got {cls!r}"
        )
    return cls


def _framework_overrides(config_name: str, prog: str, func: Callable[..., Any], args: list[str]) -> list[str]:
    """Hydra settings every command shares; they come first so the user's overrides win."""
    overrides = [
        "hydra.run.dir=${out_dir}",
        "hydra.sweep.dir=${out_dir}",
        "hydra.sweep.subdir=${hydra.job.num}",
        "hydra.output_subdir=null",
        "hydra/job_logging=none",
        "hydra/hydra_logging=none",
        f"hydra.job.name={config_name}",
        f"hydra.help.app_name={prog}",
        f"hydra.help.header={quote_override_value(_help_header(prog, func))}",
    ]
    if "out_dir" not in override_keys(args):
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        overrides.append(f"out_dir=runs/{config_name}/{stamp}")
    return overrides


def _help_header(prog: str, func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    first = doc.split("\n\n")[0].replace("\n", " ")
    return (
        f"{prog}: {first}\n\nOverride any key with key=value (e.g. out_dir=PATH); "
        "--cfg job prints the resolved config.\n"
    )


def _execute(
    func: CommandFn,
    cls: type[CommandConfig],
    cfg: DictConfig,
    prog: str,
    argv: list[str],
    fresh: Path | None,
    scratch: Path | None = None,
) -> None:
    """Body of the Hydra task: validate, record provenance, run, write the summary.

    ``fresh`` is the requested out_dir when this invocation creates it: it is made private (0700), and
    removed again when the config turns out to be invalid (a typo leaves no empty run folder).
    ``scratch`` is Hydra's run dir on a secondary torchrun rank, which neither creates nor removes
    ``out_dir`` (:func:`_secondary_run_dir`).
    """
    runtime_dir = Path(HydraConfig.get().runtime.output_dir)
    if scratch is not None:  # the out_dir rank 0 uses: Hydra's subfolder of scratch, under out_dir
        out_dir = Path(cfg.out_dir).absolute() / runtime_dir.resolve().relative_to(scratch.resolve())
        _execute_secondary(func, _validate(cfg, cls, out_dir, prog, fresh=None), prog)
        return
    out_dir = runtime_dir
    typed = _validate(cfg, cls, out_dir, prog, fresh)
    if fresh is not None:
        _make_private(out_dir, fresh)
    setup_logging(log_file=out_dir / "run.log")
    try:
        info = _record(cfg, out_dir, prog, argv)
        log.info("%s -> %s", prog, out_dir)
        start = time.perf_counter()
        result = func(typed)
        summary = dict(result or {})
        atomic_write_json(out_dir / "summary.json", summary)
    except (ValueError, FileNotFoundError) as exc:
        if not is_user_error(exc) or _debug():
            raise
        _fail(prog, exc)
    else:
        elapsed = time.perf_counter() - start
        atomic_write_json(out_dir / "run.json", {**info, "duration_s": round(elapsed, 3)})
        log.info("%s done in %.1fs: %s", prog, elapsed, format_summary(summary))
        log.info("summary: %s", out_dir / "summary.json")
    finally:
        setup_logging()  # console only: closes run.log (matters when commands run in-process)


def _execute_secondary(func: CommandFn, typed: Any, prog: str) -> None:
    """A torchrun rank other than 0: run the function but write nothing into ``out_dir`` (rank 0 writes
    config.yaml, run.json, run.log and summary.json) and log errors only."""
    setup_logging(level="ERROR")
    try:
        func(typed)
    except (ValueError, FileNotFoundError) as exc:
        if not is_user_error(exc) or _debug():
            raise
        _fail(prog, exc)


def _validate(cfg: DictConfig, cls: type[CommandConfig], out_dir: Path, prog: str, fresh: Path | None) -> Any:
    """The typed config, its input paths checked; a user error is reported before anything is written."""
    try:
        cfg.out_dir = str(out_dir)
        typed = to_dataclass(cfg, cls)
        check_input_paths(typed)
    except ConfigError as exc:
        if fresh is not None:
            for folder in (out_dir, fresh):  # rmdir: only while empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
        if _debug():
            raise
        _fail(prog, exc)
    return typed


def _make_private(out_dir: Path, fresh: Path) -> None:
    """Mode 0700 for the out_dir this invocation created (and a multirun job folder inside it)."""
    out_dir, fresh = out_dir.resolve(), fresh.resolve()
    for folder in {fresh, out_dir}:
        if folder == fresh or fresh in folder.parents:
            with contextlib.suppress(OSError):
                folder.chmod(0o700)


def _record(cfg: DictConfig, out_dir: Path, prog: str, argv: list[str]) -> dict[str, Any]:
    """Write ``config.yaml`` (resolved) and ``run.json`` (provenance), secrets redacted; returns run.json."""
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    atomic_write_text(out_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(redact_config(resolved))))
    info = {"command": prog, "out_dir": str(out_dir), **run_info(argv)}
    atomic_write_json(out_dir / "run.json", info)
    return info


def is_user_error(exc: BaseException) -> bool:
    """User errors are reported in one line: ConfigError, a missing file, or any ``ValueError``
    subclass defined inside rewind (e.g. ``StoreError``). A bare ``ValueError`` is a bug: traceback."""
    if isinstance(exc, (ConfigError, FileNotFoundError)):
        return True
    module = type(exc).__module__
    return isinstance(exc, ValueError) and (module == "rewind" or module.startswith("rewind."))


def format_summary(summary: Mapping[str, Any], max_items: int = 8) -> str:
    """Short human rendering of the scalar entries of a summary dict."""
    parts = []
    for key, value in summary.items():
        if isinstance(value, float):
            parts.append(f"{key}={value:.4g}")
        elif isinstance(value, (int, str, bool)) and len(str(value)) <= 60:
            parts.append(f"{key}={value}")
    more = len(parts) - max_items
    text = ", ".join(parts[:max_items]) + (f", ... (+{more})" if more > 0 else "")
    return text or f"{len(summary)} entries"


def _fail(prog: str, exc: BaseException) -> typing.NoReturn:
    """Report a user error as one line on stderr and exit with status 2."""
    message = exc.strerror + f": {exc.filename}" if isinstance(exc, OSError) and exc.filename else str(exc)
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)
