"""Typed configuration: the base of every command's schema, user-error type, and DictConfig -> dataclass.

Each command's root config is a dataclass deriving from :class:`CommandConfig`. Validation lives in the
dataclass's ``__post_init__``, in one style: :func:`require` for a condition, :func:`check_choice` for
a name from a list, :func:`check_range` for bounds; each raises :class:`ConfigError` whose message
names the field, e.g. ``episodes must be >= 1; got 0``. :func:`to_dataclass` builds the instance, so
the same checks run whether a config comes from Hydra, from YAML, or from Python code.

Renamed keys (:data:`RENAMED_KEYS`): an override of an old key is one error naming the new key, and a
config saved under an old key (a training state, a loop's ``loop.json``) reads under the new one.

Input paths are checked by name: a field called ``path``, ``calibration`` or ending in ``_path`` /
``_paths`` names something that must exist when it is set (:func:`check_input_paths`, run by every
command before it starts). Outputs are called ``out``, ``out_dir``, ``store``, ``store_out``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

T = TypeVar("T")

#: Config keys renamed since they were introduced (old dotted key -> new; only the last part changes):
#: "weights" means policy weights only, and the per-step tag is a "source" as the store calls it.
RENAMED_KEYS: dict[str, str] = {
    "data.source_weights": "data.sample_weights",
    "data.weight_mode": "data.sample_weight_mode",
    "data.mask_zero_weight": "data.mask_zero_sample_weight",
    "data.label_boundaries": "data.source_boundaries",
    "finetune.source_weights": "finetune.sample_weights",
    "finetune.weight_mode": "finetune.sample_weight_mode",
}


class ConfigError(ValueError):
    """Invalid user input (a config value, an argument, a path).

    Commands report it as one line and exit with status 2 instead of a traceback. Subclass it for
    other user-facing errors that should be reported the same way.
    """


@dataclasses.dataclass
class CommandConfig:
    """Fields every command has. Command schemas subclass this (give every field a default or MISSING).

    Attributes:
        out_dir: folder for everything the run writes (config.yaml, run.json, summary.json, logs).
            Mandatory in Python; on the command line it defaults to ``runs/<command>/<timestamp>``.
    """

    out_dir: str = MISSING


def require(condition: bool, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``condition`` holds (for ``__post_init__``)."""
    if not condition:
        raise ConfigError(message)


def check_choice(key: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise ``ConfigError("<key> must be one of [a, b]; got 'x'")`` unless ``value in choices``."""
    if value not in choices:
        shown = f"'{value}'" if isinstance(value, str) else str(value)
        raise ConfigError(f"{key} must be one of [{', '.join(map(str, choices))}]; got {shown}")


def check_range(key: str, value: float, lo: float | None = None, hi: float | None = None) -> None:
    """Raise :class:`ConfigError` unless ``lo <= value <= hi`` (either bound optional): ``<key> must be
    >= lo``, ``<= hi`` or ``in [lo, hi]; got value``."""
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"in [{lo}, {hi}]"
        raise ConfigError(f"{key} must be {bound}; got {value}")


def to_dataclass(cfg: DictConfig | dict[str, Any], cls: type[T]) -> T:
    """Turn ``cfg`` into an instance of the dataclass ``cls``, running its ``__post_init__`` checks.

    ``cfg`` may already be typed with ``cls`` (a Hydra schema) or be a plain mapping, which is then
    merged onto ``cls``'s schema so unknown keys and wrong types are rejected.

    Raises:
        ConfigError: on a missing mandatory value, an unknown key, a wrong type, or a failed check.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"to_dataclass needs a dataclass type, got {cls!r}")
    try:
        if not isinstance(cfg, DictConfig) or OmegaConf.get_type(cfg) is not cls:
            cfg = OmegaConf.merge(OmegaConf.structured(cls), cfg)
        obj = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ConfigError(f"missing required value '{key}' (set it with {key}=...)") from exc
    except OmegaConfBaseException as exc:
        raise ConfigError(_describe(exc)) from exc
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not isinstance(obj, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(obj).__name__}")
    return obj


def _describe(exc: OmegaConfBaseException) -> str:
    """First line of an OmegaConf error, prefixed with the offending key when it does not name it."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{key}: {line}" if key and f"'{key}'" not in line else line


def check_renamed_key(key: str) -> None:
    """Raise :class:`ConfigError` naming the new key when ``key`` (or a key under it) was renamed."""
    for old, new in RENAMED_KEYS.items():
        if key == old or key.startswith(old + "."):
            raise ConfigError(f"'{old}' was renamed '{new}': use {new + key[len(old) :]}=...")


def with_renamed_keys(saved: Any) -> Any:
    """A copy of the saved config tree ``saved`` with every old key of :data:`RENAMED_KEYS` under its new
    name (what a run saved before a rename is compared with)."""
    if not isinstance(saved, dict):
        return saved
    out = {k: with_renamed_keys(v) for k, v in saved.items()}
    for old, new in RENAMED_KEYS.items():
        *parents, leaf = old.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node and new.rsplit(".", 1)[-1] not in node:
            node[new.rsplit(".", 1)[-1]] = node.pop(leaf)
    return out


def is_input_path_key(name: str) -> bool:
    """True for the field names that hold input paths (see the module docstring)."""
    return name in ("path", "calibration") or name.endswith(("_path", "_paths"))


def missing_input_paths(obj: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted key, value)`` for every set input path of the dataclass ``obj`` that does not exist."""
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from missing_input_paths(value, f"{key}.")
        elif is_input_path_key(field.name):
            values = value if isinstance(value, (list, tuple)) else [value]
            for item in values:
                if isinstance(item, (str, os.PathLike)) and str(item) and not os.path.exists(item):
                    yield key, str(item)


def check_input_paths(obj: Any) -> None:
    """Raise :class:`ConfigError` naming the first set input path of ``obj`` that does not exist."""
    for key, value in missing_input_paths(obj):
        raise ConfigError(f"{key} does not exist: {value}")
