"""Schema of the replay store: version, source vocabulary, store spec, records and validation.

Everything that decides whether data may enter the store lives here, so the writer
(`rewind.store.store`) and the importers share exactly one set of checks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Version of the on-disk layout (SQLite tables + per-episode HDF5 layout). Bump on any change.
#: 2 added content hashes (``episodes.content_sha256``, per-dataset ``sha256`` attrs). Stores of
#: version 1 still open: a writer migrates the index in place, their old episodes read as "unverified".
SCHEMA_VERSION = 2

#: Older layouts this code still reads (and migrates when opened for writing).
READABLE_SCHEMA_VERSIONS = (1, 2)

#: Fixed vocabulary of per-step source labels. A step's code is its index in this tuple.
SOURCES: tuple[str, ...] = (
    "demo",
    "policy",
    "pre_intervention",
    "recovery",
    "correction",
    "human",
    "guided",
)
SOURCE_CODES: dict[str, int] = {name: i for i, name in enumerate(SOURCES)}

#: Observation dtypes a store accepts.
OBS_DTYPES = ("float32", "float64", "uint8", "int32", "int64")
_DTYPES = {name: np.dtype(name) for name in OBS_DTYPES}

#: Per-episode metadata keys accepted by writers (anything else goes into ``extra``).
META_KEYS = ("env_id", "seed", "policy_version", "round", "success", "n_operator_steps", "extra")

_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class StoreError(ValueError):
    """Any problem with a replay store or with data offered to it; the message names the field."""


@dataclass(frozen=True)
class StoreSpec:
    """Static description of what every episode in a store looks like.

    Attributes:
        obs: observation key -> (per-step shape, dtype name). A step of key ``k`` is an array of
            shape ``obs[k][0]``; an episode stores ``[T, *shape]``. ``uint8`` keys of rank 3
            (``H x W x C``) are treated as images and stored chunked + gzip-compressed.
            Data offered for a float key may be any float dtype (converted to the spec dtype);
            every other key needs exactly the spec dtype.
        action_dim: ``Da``; actions are float32 ``[T, Da]``.
        state_dim: ``Ds``; simulator states are float64 ``[T, Ds]`` (flat MuJoCo integration state).
        env_id: default environment id of episodes (an episode may override it in its metadata).
    """

    obs: Mapping[str, tuple[tuple[int, ...], str]]
    action_dim: int
    state_dim: int
    env_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.obs, Mapping) or not self.obs:
            raise StoreError("spec.obs: must be a non-empty mapping of key -> (shape, dtype)")
        norm: dict[str, tuple[tuple[int, ...], str]] = {}
        for key, entry in self.obs.items():
            if not isinstance(key, str) or not _KEY_RE.match(key):
                raise StoreError(f"spec.obs: invalid key {key!r} (use letters, digits, '_', '.', '-')")
            try:
                shape, dtype = entry
                shape = tuple(int(d) for d in shape)
                dtype = np.dtype(dtype).name
            except (TypeError, ValueError) as exc:
                raise StoreError(f"spec.obs[{key!r}]: expected (shape, dtype), got {entry!r}") from exc
            if any(d <= 0 for d in shape):
                raise StoreError(f"spec.obs[{key!r}]: shape {shape} has a non-positive dimension")
            if dtype not in OBS_DTYPES:
                raise StoreError(f"spec.obs[{key!r}]: dtype {dtype} not in {OBS_DTYPES}")
            norm[key] = (shape, dtype)
        object.__setattr__(self, "obs", dict(sorted(norm.items())))
        for name in ("action_dim", "state_dim"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise StoreError(f"spec.{name}: must be a positive int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if not isinstance(self.env_id, str) or not self.env_id:
            raise StoreError(f"spec.env_id: must be a non-empty string, got {self.env_id!r}")

    def __hash__(self) -> int:
        return hash(self.to_json())

    def is_image(self, key: str) -> bool:
        """True when ``key`` is stored as a chunked, compressed image (uint8, rank 3)."""
        shape, dtype = self.obs[key]
        return dtype == "uint8" and len(shape) == 3

    def to_json(self) -> str:
        """Serialise to the JSON stored in the index (``obs`` shapes as lists)."""
        obs = {k: {"shape": list(s), "dtype": d} for k, (s, d) in self.obs.items()}
        payload = {"obs": obs, "action_dim": self.action_dim, "state_dim": self.state_dim}
        payload["env_id"] = self.env_id
        return json.dumps(payload, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoreSpec:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        obs = {k: (tuple(v["shape"]), v["dtype"]) for k, v in d["obs"].items()}
        return cls(obs=obs, action_dim=d["action_dim"], state_dim=d["state_dim"], env_id=d["env_id"])

    def diff(self, other: StoreSpec) -> list[str]:
        """Human-readable list of fields where ``other`` differs from this spec (empty if equal)."""
        out = []
        for key in sorted(set(self.obs) | set(other.obs)):
            if self.obs.get(key) != other.obs.get(key):
                out.append(f"obs[{key!r}]: store has {self.obs.get(key)}, got {other.obs.get(key)}")
        for name in ("action_dim", "state_dim", "env_id"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name}: store has {getattr(self, name)!r}, got {getattr(other, name)!r}")
        return out


@dataclass(frozen=True)
class EpisodeInfo:
    """Index row of one committed episode (cheap: read from SQLite, no HDF5 access).

    ``source_counts`` maps source label -> number of steps with that label. ``content_sha256`` is
    the episode's content hash recorded at commit (``None`` for episodes written before schema 2,
    which cannot be verified).
    """

    id: int
    length: int
    env_id: str
    seed: int | None
    policy_version: str
    round: int
    success: bool | None
    n_operator_steps: int
    extra: dict[str, Any] = field(hash=False)
    source_counts: dict[str, int] = field(hash=False)
    created_at: float
    file: str
    content_sha256: str | None = None

    def meta(self) -> dict[str, Any]:
        """The per-episode metadata as a plain dict (the keys of :data:`META_KEYS`)."""
        return {k: getattr(self, k) for k in META_KEYS}


@dataclass
class Episode:
    """One fully loaded episode. ``T`` = ``info.length``.

    Attributes:
        obs: key -> ``[T, *shape]`` array of the spec dtype.
        actions: float32 ``[T, Da]``.
        states: float64 ``[T, Ds]``.
        sources: uint8 ``[T]`` codes into :data:`SOURCES`.
        rewards: float32 ``[T]``.
        info: the index row.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    states: np.ndarray
    sources: np.ndarray
    rewards: np.ndarray
    info: EpisodeInfo

    @property
    def source_names(self) -> list[str]:
        """Per-step source labels as strings, length ``T``."""
        return [SOURCES[c] for c in self.sources]


def source_code(label: str | int, field_name: str = "source") -> int:
    """Map a label (or an already valid code) to its code; raise :class:`StoreError` otherwise."""
    if isinstance(label, (int, np.integer)) and not isinstance(label, bool):
        if 0 <= int(label) < len(SOURCES):
            return int(label)
    elif isinstance(label, str) and label in SOURCE_CODES:
        return SOURCE_CODES[label]
    raise StoreError(f"{field_name}: unknown source label {label!r}; expected one of {list(SOURCES)}")


def _coerce(
    name: str,
    value: Any,
    dtype: str,
    shape: tuple[int, ...],
    kinds: str = "f",
    finite: bool = True,
    stepped: bool = False,
) -> np.ndarray:
    """Check dtype + shape (+ finiteness if ``finite``) of ``value`` and return it as ``dtype``.

    A float ``dtype`` also accepts inputs whose dtype kind is in ``kinds`` (converted); any other
    dtype must match exactly. For ``stepped`` (``[T, ...]``) arrays a NaN/inf error names the first bad step.
    """
    arr = np.asarray(value)
    want = np.dtype(dtype)
    if not (arr.dtype == want or (want.kind == "f" and arr.dtype.kind in kinds)):
        raise StoreError(f"{name}: dtype {arr.dtype} does not match expected {want}")
    if arr.shape != shape:
        raise StoreError(f"{name}: shape {arr.shape} does not match expected {shape}")
    arr = arr.astype(want, copy=False)
    if finite and want.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            where = f" at step {int(np.argwhere(bad)[0][0])}" if stepped else ""
            raise StoreError(f"{name}: contains NaN or inf{where} (after conversion to {want})")
    return arr


def validate_episode_arrays(
    spec: StoreSpec,
    obs: Mapping[str, Any],
    actions: Any,
    states: Any,
    sources: Sequence[str | int] | np.ndarray,
    rewards: Any,
) -> dict[str, Any]:
    """Validate a whole episode against ``spec``; return normalised arrays.

    Args:
        obs: key -> ``[T, *shape]``; keys must equal the spec's keys.
        actions: ``[T, Da]``; states: ``[T, Ds]``; rewards: ``[T]``.
        sources: ``T`` labels (strings of :data:`SOURCES` or their int codes).

    Returns:
        dict with ``obs`` (dict), ``actions``, ``states``, ``sources`` (uint8 codes), ``rewards``.

    Raises:
        StoreError: naming the first offending field.
    """
    if not isinstance(obs, Mapping):
        raise StoreError(f"obs: expected a dict of arrays, got {type(obs).__name__}")
    check_obs_keys(spec, obs.keys())
    actions = np.asarray(actions)
    if actions.ndim < 1 or actions.shape[0] == 0:
        raise StoreError(f"actions: expected shape [T, {spec.action_dim}] with T >= 1, got {actions.shape}")
    length = actions.shape[0]
    out_obs = {}
    for key, (shape, dtype) in spec.obs.items():
        out_obs[key] = _coerce(f"obs[{key!r}]", obs[key], dtype, (length, *shape), stepped=True)
    src = np.asarray(sources)
    if src.shape != (length,):
        raise StoreError(f"sources: shape {src.shape} does not match expected ({length},)")
    if src.dtype.kind in "iu":
        bad = (src < 0) | (src >= len(SOURCES))
        if bad.any():
            raise StoreError(f"sources: unknown source code {src[bad][0]!r} at step {int(np.argmax(bad))}")
        codes = src.astype(np.uint8)
    else:
        codes = np.array([source_code(s, f"sources[{i}]") for i, s in enumerate(src.tolist())], np.uint8)
    return {
        "obs": out_obs,
        "actions": _coerce("actions", actions, "float32", (length, spec.action_dim), "fiu", stepped=True),
        "states": _coerce("states", states, "float64", (length, spec.state_dim), "fiu", stepped=True),
        "sources": codes,
        "rewards": _coerce("rewards", rewards, "float32", (length,), "fiu", stepped=True),
    }


def validate_step(spec: StoreSpec, obs: Mapping[str, Any], action: Any, state: Any) -> tuple:
    """Check keys, shapes and dtypes of one step (``obs[k]`` of shape ``spec.obs[k][0]``, action
    ``[Da]``, state ``[Ds]``). Finiteness is checked later, vectorised, on the whole episode.

    Returns ``(obs_dict, action, state)`` as fresh copies in the spec dtypes (so callers may reuse
    their buffers); raises :class:`StoreError` naming the field.
    """
    if not isinstance(obs, Mapping):
        raise StoreError(f"obs: expected a dict of arrays, got {type(obs).__name__}")
    if obs.keys() != spec.obs.keys():
        check_obs_keys(spec, obs.keys())
    out = {k: _step_copy(f"obs[{k!r}]", obs[k], d, s, "f") for k, (s, d) in spec.obs.items()}
    action = _step_copy("action", action, "float32", (spec.action_dim,), "fiu")
    state = _step_copy("state", state, "float64", (spec.state_dim,), "fiu")
    return out, action, state


def _step_copy(name: str, value: Any, dtype: str, shape: tuple[int, ...], kinds: str) -> np.ndarray:
    """Fast path of :func:`_coerce` for one step (no finiteness check); always returns a copy."""
    want = _DTYPES[dtype]
    arr = np.asarray(value)
    if arr.shape != shape or not (arr.dtype == want or (want.kind == "f" and arr.dtype.kind in kinds)):
        _coerce(name, value, dtype, shape, kinds, finite=False)  # raises the detailed error
    return np.array(arr, dtype=want)


def check_obs_keys(spec: StoreSpec, keys: Any) -> None:
    """Raise :class:`StoreError` unless ``keys`` equals the spec's observation keys."""
    keys = set(keys)
    missing, unknown = sorted(set(spec.obs) - keys), sorted(keys - set(spec.obs))
    if missing:
        raise StoreError(f"obs: missing key(s) {missing} required by the store spec")
    if unknown:
        raise StoreError(f"obs: unknown key(s) {unknown} not in the store spec {sorted(spec.obs)}")


def normalize_meta(meta: Mapping[str, Any], spec: StoreSpec, length: int) -> dict[str, Any]:
    """Validate per-episode metadata and fill defaults.

    Keys: ``env_id`` (default ``spec.env_id``), ``seed`` (int or None), ``policy_version`` (str),
    ``round`` (int >= 0), ``success`` (bool or None), ``n_operator_steps`` (0 <= int <= length),
    ``extra`` (JSON-serialisable dict). Unknown keys raise :class:`StoreError`.
    """
    unknown = sorted(set(meta) - set(META_KEYS))
    if unknown:
        raise StoreError(f"meta: unknown key(s) {unknown}; allowed {list(META_KEYS)} (put others in 'extra')")
    m = {"env_id": spec.env_id, "seed": None, "policy_version": "", "round": 0, "success": None}
    m.update({"n_operator_steps": 0, "extra": {}})
    m.update(meta)
    if not isinstance(m["env_id"], str) or not m["env_id"]:
        raise StoreError(f"meta.env_id: must be a non-empty string, got {m['env_id']!r}")
    if m["seed"] is not None:
        m["seed"] = _as_int("meta.seed", m["seed"])
    if not isinstance(m["policy_version"], str):
        raise StoreError(f"meta.policy_version: must be a string, got {m['policy_version']!r}")
    m["round"] = _as_int("meta.round", m["round"], lo=0)
    if m["success"] is not None:
        if not isinstance(m["success"], (bool, np.bool_)):
            raise StoreError(f"meta.success: must be a bool or None, got {m['success']!r}")
        m["success"] = bool(m["success"])
    m["n_operator_steps"] = _as_int("meta.n_operator_steps", m["n_operator_steps"], lo=0, hi=length)
    if not isinstance(m["extra"], Mapping):
        raise StoreError(f"meta.extra: must be a dict, got {type(m['extra']).__name__}")
    try:
        m["extra"] = json.loads(json.dumps(dict(m["extra"]), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"meta.extra: not JSON-serialisable ({exc})") from exc
    return m


def _as_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if not (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
            raise StoreError(f"{name}: must be an int, got {value!r}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise StoreError(f"{name}: {v} outside the allowed range [{lo}, {hi}]")
    return v


def store_spec_for(env: Any) -> StoreSpec:
    """The spec matching a Gymnasium env's observation, action and state layout (a dict observation
    space, a box action space, ``env.unwrapped.state_dim`` and ``env.spec.id``)."""
    space = env.observation_space
    obs = {k: (tuple(s.shape), np.dtype(s.dtype).name) for k, s in space.spaces.items()}
    return StoreSpec(
        obs=obs, action_dim=env.action_space.shape[0], state_dim=env.unwrapped.state_dim, env_id=env.spec.id
    )
