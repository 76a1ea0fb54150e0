"""How far a round's trained-on steps lie outside the normalizer the fine-tuning keeps.

With ``finetune.normalizer=keep`` every round trains with the base policy's normalizer, fitted to the
demos. A channel that barely varies in the demos (a cube quaternion's x/y) maps a small tilt in a
correction to a value of 100 or more. :func:`round_obs_range` measures that per observation key for
the steps a round trains on (the labels of non-zero sample weight), so each round's record says it
(``data.obs_range``) and the log warns when a key is far out on many steps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rewind.store import ReplayStore
from rewind.store.schema import SOURCE_CODES, SOURCES
from rewind.store.windows import ReplayBuffer

log = logging.getLogger(__name__)

#: a normalized value beyond this counts as out of range (min-max maps the fitted range to [-1, 1])
THRESHOLD = 1.5
#: the share of a round's trained-on steps out of range on one key above which the loop warns
WARN_SHARE = 0.1


def store_arrays(path: str | Path, labels: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Every step of the store at ``path`` as training reads it (:meth:`ReplayBuffer.from_store`: low-dim
    keys, steps undone by a ``restore`` rewind left out), only the steps labelled one of ``labels``
    when given, as ``obs/<key>`` and ``action`` arrays ``[N, D]`` (``{}`` for an empty store).

    Raises:
        ValueError: a label is not a step label.
    """
    unknown = sorted(set(labels) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown step label(s) {unknown}; valid: {list(SOURCES)}")
    with ReplayStore.open(path) as store:
        if not store.episodes():
            return {}
        low_dim = [k for k, (shape, _) in store.spec.obs.items() if len(shape) == 1]  # images not loaded
        data = ReplayBuffer.from_store(store, obs_keys=low_dim).data
    keep = np.isin(data["source"], [SOURCE_CODES[x] for x in labels]) if labels else slice(None)
    return {k: v[keep] for k, v in data.items() if k.startswith("obs/") or k == "action"}


def round_obs_range(
    weights: Path, stores: Mapping[int, Path], sample_weights: Mapping[str, float], r: int
) -> dict[str, Any]:
    """The ``data.obs_range`` entry of round ``r``: per ``obs/<key>`` the largest ``|normalized value|``
    and the share of steps beyond :data:`THRESHOLD` under the normalizer of ``weights``, over the steps
    of ``stores`` whose label has a non-zero weight (keys never out of range are left out). Logs a
    warning for each key out of range on more than :data:`WARN_SHARE` of those steps."""
    from rewind.policies.io import load_policy_weights

    norm = load_policy_weights(weights).normalizer
    labels = [s for s in SOURCES if sample_weights.get(s, 1.0) > 0]
    parts = [store_arrays(p, labels) for p in stores.values()]
    parts = [p for p in parts if p]
    data = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    report = norm.range_report(data, THRESHOLD) if data else {}
    keys = {k: v for k, v in report.items() if k.startswith("obs/") and v["frac_over"] > 0}
    for key, v in keys.items():
        if v["frac_over"] > WARN_SHARE:
            log.warning(
                "round %d: %.0f%% of the trained-on steps have %s beyond the kept normalizer's range "
                "(|value| up to %.0f; the demos map to [-1, 1]); finetune.normalizer=refit fits it to all the data",
                r,
                100 * v["frac_over"],
                key,
                v["max_abs"],
            )
    steps = int(next(iter(data.values())).shape[0]) if data else 0
    return {"threshold": THRESHOLD, "steps": steps, "labels": labels, "keys": keys}
