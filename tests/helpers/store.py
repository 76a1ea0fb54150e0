"""Deterministic Stack3-like episodes shared by the store tests and the crash-test writer."""

from __future__ import annotations

from typing import Any

import numpy as np

from rewind.store import SOURCES, StoreSpec

LOW_DIM = {
    "eef_pos": (3,),
    "eef_quat": (4,),
    "gripper_qpos": (2,),
    "cube_pos": (9,),
    "cube_quat": (12,),
    "eef_to_cubes": (9,),
    "contact": (1,),
    "phase": (1,),
}
ACTION_DIM = 5
STATE_DIM = 57
ENV_ID = "rewind/Stack3-v0"


def make_spec(image: bool = False) -> StoreSpec:
    """Stack3-like spec: 8 low-dim float32 keys (41 floats), optionally a 16x16x3 camera."""
    obs: dict[str, tuple[tuple[int, ...], str]] = {k: (s, "float32") for k, s in LOW_DIM.items()}
    if image:
        obs["cam"] = ((16, 16, 3), "uint8")
    return StoreSpec(obs=obs, action_dim=ACTION_DIM, state_dim=STATE_DIM, env_id=ENV_ID)


def make_episode(index: int, image: bool = False, length: int | None = None) -> dict[str, Any]:
    """Episode number ``index`` as keyword arguments of ``ReplayStore.add_episode`` (deterministic)."""
    rng = np.random.default_rng([1234, index])
    t = int(length if length is not None else 10 + (index * 37) % 60)
    obs = {k: rng.standard_normal((t, *s)).astype(np.float32) for k, s in LOW_DIM.items()}
    if image:
        obs["cam"] = rng.integers(0, 256, size=(t, 16, 16, 3), dtype=np.uint8)
    cut = t // 2
    sources = [SOURCES[index % 2]] * cut + [SOURCES[3 + index % 4]] * (t - cut)
    meta = {
        "seed": index,
        "policy_version": f"v{index % 3}",
        "round": index % 4,
        "success": bool(index % 3 == 0),
        "n_operator_steps": t - cut if index % 4 == 2 else 0,
        "extra": {"events": [{"t": cut, "kind": "rewind"}], "index": index},
    }
    return {
        "obs": obs,
        "actions": rng.uniform(-1, 1, (t, ACTION_DIM)).astype(np.float32),
        "states": rng.standard_normal((t, STATE_DIM)),
        "sources": sources,
        "rewards": rng.random(t).astype(np.float32),
        "meta": meta,
    }


def assert_episode_equals(ep: Any, expected: dict[str, Any]) -> None:
    """Assert a loaded ``Episode`` equals ``make_episode`` output exactly."""
    assert sorted(ep.obs) == sorted(expected["obs"])
    for k, v in expected["obs"].items():
        np.testing.assert_array_equal(ep.obs[k], v, err_msg=k)
        assert ep.obs[k].dtype == v.dtype
    np.testing.assert_array_equal(ep.actions, expected["actions"])
    np.testing.assert_array_equal(ep.states, expected["states"])
    np.testing.assert_array_equal(ep.rewards, expected["rewards"])
    assert ep.source_names == list(expected["sources"])
    for key, value in expected["meta"].items():
        assert getattr(ep.info, key) == value, key
