"""Policy registry: name -> (config dataclass, policy class), and :func:`make_policy`.

Built in: ``"diffusion"`` and ``"flow"``. ACT registers itself as ``"act"`` from
``policies/act/__init__.py``::

    from rewind.policies.registry import register_policy
    register_policy("act", ACTConfig, ACTPolicy)

That package is imported lazily (on the first lookup) and only if it exists, so everything here
works before it is written. A policy class is constructed as ``policy_cls(config, shape_meta)`` and
must expose ``config`` and ``shape_meta`` attributes (see :mod:`rewind.policies.obs_conditioned`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import numbers
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from rewind.policies.base import ActionChunkPolicy
from rewind.policies.diffusion import DiffusionConfig, DiffusionPolicy
from rewind.policies.flow import FlowConfig, FlowPolicy
from rewind.policies.shape_meta import normalize_shape_meta, shape_meta_from_spec

__all__ = [
    "POLICIES",
    "check_field_types",
    "get_policy_classes",
    "make_config",
    "make_policy",
    "policy_name_of",
    "register_policy",
    "shape_meta_from_spec",
]

POLICIES: dict[str, tuple[type, type[ActionChunkPolicy]]] = {
    "diffusion": (DiffusionConfig, DiffusionPolicy),
    "flow": (FlowConfig, FlowPolicy),
    # "act": registered by rewind.policies.act (imported lazily by _load_optional below).
}

#: Optional policy packages imported on first lookup; each calls :func:`register_policy`.
_OPTIONAL_PACKAGES = ("rewind.policies.act",)
_optional_loaded = False


def register_policy(name: str, config_cls: type, policy_cls: type[ActionChunkPolicy]) -> None:
    """Register ``policy_cls`` (built as ``policy_cls(config, shape_meta)``) under ``name``.

    Re-registering the same classes is a no-op; another pair under a taken name raises.
    """
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"register_policy({name!r}): config_cls must be a dataclass; got {config_cls!r}")
    if not (isinstance(policy_cls, type) and issubclass(policy_cls, ActionChunkPolicy)):
        raise TypeError(f"register_policy({name!r}): policy_cls must subclass ActionChunkPolicy")
    old = POLICIES.get(name)
    if old is not None and old != (config_cls, policy_cls):
        raise ValueError(f"policy name {name!r} is already registered to {old[1].__name__}")
    POLICIES[name] = (config_cls, policy_cls)


def _load_optional() -> None:
    """Import optional policy packages that exist (errors inside an existing package propagate)."""
    global _optional_loaded
    if _optional_loaded:
        return
    _optional_loaded = True
    for module in _OPTIONAL_PACKAGES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def get_policy_classes(name: str) -> tuple[type, type[ActionChunkPolicy]]:
    """``(config_cls, policy_cls)`` of ``name``; an unknown name lists the registered ones."""
    _load_optional()
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; valid: {sorted(POLICIES)}")
    return POLICIES[name]


def policy_name_of(policy: ActionChunkPolicy) -> str:
    """Registered name of ``policy``'s class."""
    _load_optional()
    for name, (_, cls) in POLICIES.items():
        if type(policy) is cls:
            return name
    raise KeyError(f"{type(policy).__name__} is not registered; registered: {sorted(POLICIES)}")


def make_config(name: str, config: Mapping[str, Any] | Any | None = None) -> Any:
    """The config dataclass of ``name`` from a dict of fields (unknown fields are listed) or an
    instance (returned as is); ``None`` gives the defaults."""
    config_cls, _ = get_policy_classes(name)
    if config is None:
        return config_cls()
    if isinstance(config, config_cls):
        return config
    if dataclasses.is_dataclass(config):
        raise TypeError(f"policy {name!r} needs a {config_cls.__name__}; got {type(config).__name__}")
    if not isinstance(config, Mapping):
        raise ValueError(f"policy {name!r}: config must be a mapping of fields; got {type(config).__name__}")
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(config) - fields, key=str)
    if unknown:
        raise ValueError(f"unknown {config_cls.__name__} fields {unknown}; valid: {sorted(fields)}")
    check_field_types(config_cls, config)
    return config_cls(**dict(config))


def check_field_types(config_cls: type, fields: Mapping[str, Any]) -> None:
    """Raise ``ValueError("horizon must be int; got 'abc' (str)")`` for the first value in ``fields``
    that does not fit its annotation in the dataclass ``config_cls`` (a config read from a file, where
    any JSON value can appear). ``bool`` is not an ``int``; a float must be finite; a list or tuple
    field takes any non-string sequence of fitting items."""
    hints = typing.get_type_hints(config_cls)
    for key, value in fields.items():
        hint = hints.get(key, Any)
        if not _fits(value, hint):
            raise ValueError(f"{key} must be {_type_name(hint)}; got {value!r} ({type(value).__name__})")


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the type annotation ``hint`` (the subset config dataclasses use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return real and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return False
        item = args[0] if args else Any
        return all(_fits(v, item) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, Mapping)
    return isinstance(hint, type) and isinstance(value, hint)


def _type_name(hint: Any) -> str:
    """``int``, ``list of str``, ``float or null``: an annotation as the error message says it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    if origin in (list, tuple, Sequence):
        return f"a list of {_type_name(args[0]) if args else 'values'}"
    if hint is float:
        return "a finite number"
    return getattr(hint, "__name__", str(hint))


def config_with_defaults(name: str, saved: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config of policy ``name`` (JSON fields) as loading it gives: fields added since it was
    saved take their defaults, so an older ``config.json`` or ``loop.json`` compares equal to today's
    defaults. Returned as JSON (``as_json``); unchanged when it does not build (the comparison that
    follows then names what differs)."""
    from rewind.utils.io import as_json

    try:
        return as_json(dataclasses.asdict(make_config(name, saved)))
    except (KeyError, TypeError, ValueError):
        return as_json(dict(saved))


def make_policy(
    name: str, config: Mapping[str, Any] | Any | None, shape_meta: Mapping[str, Any]
) -> ActionChunkPolicy:
    """Build the registered policy ``name`` for ``shape_meta`` (see :mod:`rewind.policies.shape_meta`;
    :func:`shape_meta_from_spec` converts a store's spec). The normalizer is unfitted."""
    _, policy_cls = get_policy_classes(name)
    return policy_cls(make_config(name, config), normalize_shape_meta(shape_meta))
