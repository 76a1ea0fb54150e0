"""Hydra's own errors (unknown key, wrong type, unknown config-group option) as one line for the user.

Hydra reports a bad override over several lines and exits with status 1. :func:`describe_hydra_error`
turns the exception into one line that names the key and value and, for an unknown name, lists the
valid ones::

    unknown key 'epsiodes' (did you mean 'episodes'?); valid: env, episodes, seed, out, ...
    episodes=abc: Value 'abc' of type 'str' could not be converted to Integer
    env=nope: unknown env; valid: lift, nut_peg, pick_place, stack3

:func:`rewind.cli.app.hydra_command` reports it as ``rewind-X: error: ...`` with exit status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

# Exceptions Hydra raises for user input while it parses the overrides and composes the config.
HYDRA_USER_ERRORS: tuple[type[Exception], ...] = (ConfigCompositionException, OverrideParseException)

_COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']*)'")
_ERROR_MERGING = re.compile(r"Error merging override (.+)")


def describe_hydra_error(exc: BaseException, schema: type | None = None) -> str:
    """One line describing a Hydra parse/composition error.

    Args:
        exc: the exception Hydra raised (see :data:`HYDRA_USER_ERRORS`).
        schema: the command's root config dataclass; its fields are the valid top-level keys when
            the exception does not carry the config node it failed on.
    """
    if isinstance(exc, MissingConfigException):
        return _unknown_option(exc)
    if isinstance(exc, OverrideParseException):
        return f"malformed override '{exc.override}' (expected key=value)"
    first = _first_line(exc)
    cause = exc.__cause__
    unknown = _COULD_NOT_OVERRIDE.match(first)
    if unknown:
        return unknown_key_message(unknown.group(1), _valid_keys(unknown.group(1), cause, schema))
    merging = _ERROR_MERGING.match(first)
    if merging and isinstance(cause, OmegaConfBaseException):
        return f"{merging.group(1)}: {_first_line(cause)}"
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    if isinstance(cause, OmegaConfBaseException):
        text += f" ({_first_line(cause)})"
    return text


def unknown_key_message(key: str, valid: list[str]) -> str:
    """``unknown key 'k' (did you mean 'x'?); valid: a, b, c`` (the parts that are known)."""
    parent, _, leaf = key.rpartition(".")
    message = f"unknown key '{key}'"
    near = difflib.get_close_matches(leaf, valid, n=1)
    if near:
        message += f" (did you mean '{parent + '.' if parent else ''}{near[0]}'?)"
    if valid:
        message += f"; valid: {', '.join(valid)}"
    return message


def _unknown_option(exc: MissingConfigException) -> str:
    """``env=nope: unknown env; valid: lift, ...`` for an option missing from a config group."""
    missing = exc.missing_cfg_file or ""
    group, _, name = missing.rpartition("/")
    if not group:
        return _first_line(exc)
    message = f"{group.replace('/', '.')}={name}: unknown {group.rsplit('/', 1)[-1]}"
    options = sorted(exc.options or [])
    return f"{message}; valid: {', '.join(options)}" if options else message


def _valid_keys(key: str, cause: BaseException | None, schema: type | None) -> list[str]:
    """Keys next to ``key``: from the config node Hydra failed on, else the schema's fields."""
    node = getattr(cause, "parent_node", None)
    if isinstance(node, DictConfig):
        keys = [str(k) for k in node.keys()]
    elif "." not in key and schema is not None and dataclasses.is_dataclass(schema):
        keys = [f.name for f in dataclasses.fields(schema)]
    else:
        return []
    return [k for k in keys if "." in key or k != "hydra"]


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__
