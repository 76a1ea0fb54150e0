"""robomimic datasets of robosuite tasks: build the env a file's ``env_meta`` describes, write
operator demos in robomimic's format, replay a demo's actions from its stored initial state.

robomimic's layout (what its ``dataset_states_to_obs.py`` and ``SequenceDataset`` read)::

    data.attrs["env_args"]         JSON {"env_name", "env_version", "type": 1 (robosuite), "env_kwargs"}
    data.attrs["total"]            number of samples
    data/demo_<i>/states           [T, 1 + nq + nv] robosuite's flattened state (time, qpos, qvel)
    data/demo_<i>/actions          [T, 7] OSC_POSE actions in [-1, 1]
    data/demo_<i>/obs/<key>        [T, ...] low-dim observations; next_obs/<key> shifted by one
    data/demo_<i>/rewards, dones   [T] (sparse reward: 1 on successful steps)
    data/demo_<i>.attrs            num_samples, model_file (the MJCF), ep_meta (JSON)
    mask/train, mask/valid         demo names
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from rewind.envs.robosuite import BY_ROBOSUITE_NAME, GYM_IDS
from rewind.envs.robosuite.controller import FORCED_KWARGS, UnsupportedEnvMeta
from rewind.envs.robosuite.env import RobosuiteEnv
from rewind.envs.robosuite.operators import make_operator

logger = logging.getLogger(__name__)

#: robomimic's EnvType.ROBOSUITE_TYPE.
ROBOSUITE_ENV_TYPE = 1


def read_env_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The ``env_meta`` (``data.attrs["env_args"]``) of a robomimic HDF5 file."""
    with h5py.File(path, "r", locking=False) as f:
        if "data" not in f or "env_args" not in f["data"].attrs:
            raise UnsupportedEnvMeta(f"{path}: no data.attrs['env_args'] (not a robomimic dataset)")
        return json.loads(str(f["data"].attrs["env_args"]))


def env_from_meta(env_meta: dict[str, Any], **kwargs: Any) -> RobosuiteEnv:
    """The :class:`RobosuiteEnv` a robomimic ``env_meta`` describes (``kwargs`` go to the env).

    Raises:
        UnsupportedEnvMeta: not a robosuite env, or a task, robot or controller the adapter lacks
            (the message lists the supported ones).
    """
    env_type = env_meta.get("type", ROBOSUITE_ENV_TYPE)
    if env_type != ROBOSUITE_ENV_TYPE:
        raise UnsupportedEnvMeta(f"env_meta type {env_type} is not robosuite ({ROBOSUITE_ENV_TYPE})")
    name = env_meta.get("env_name")
    if name not in BY_ROBOSUITE_NAME:
        valid = ", ".join(f"{rs} ({GYM_IDS[t][0]})" for rs, t in BY_ROBOSUITE_NAME.items())
        raise UnsupportedEnvMeta(f"robosuite task {name!r} is not supported; supported tasks: {valid}")
    version = str(env_meta.get("env_version", "unknown"))
    if not version.startswith("1.5"):
        logger.warning("the dataset was made with robosuite %s; replaying it on 1.5.2 may diverge", version)
    env_kwargs = {k: v for k, v in env_meta.get("env_kwargs", {}).items() if k not in FORCED_KWARGS}
    return RobosuiteEnv(BY_ROBOSUITE_NAME[name], env_kwargs=env_kwargs, **kwargs)


def env_from_dataset(path: str | os.PathLike, **kwargs: Any) -> RobosuiteEnv:
    """The env of a robomimic HDF5 file (see :func:`env_from_meta`)."""
    return env_from_meta(read_env_meta(path), **kwargs)


def env_meta_of(env: RobosuiteEnv) -> dict[str, Any]:
    """robomimic's ``env_meta`` for ``env`` (what :func:`env_from_meta` reads back)."""
    import robosuite  # noqa: PLC0415 - optional extra, present whenever an env exists

    kwargs = {k: v for k, v in env.env_kwargs.items() if k not in FORCED_KWARGS}
    kwargs["robots"] = [kwargs["robots"]]
    return {
        "env_name": env.task.env_name,
        "env_version": robosuite.__version__,
        "type": ROBOSUITE_ENV_TYPE,
        "env_kwargs": kwargs,
    }


def _record_demo(env: RobosuiteEnv, op, seed: int, max_steps: int) -> dict[str, Any]:
    obs, _ = env.reset(seed=seed)
    op.reset(np.random.default_rng(seed))
    rec: dict[str, list] = {"obs": [], "states": [], "actions": [], "rewards": []}
    for _ in range(max_steps):
        rec["obs"].append(obs)
        rec["states"].append(env.robomimic_state())
        action = op.act(env)
        obs, reward, terminated, _, _ = env.step(action)
        rec["actions"].append(action)
        rec["rewards"].append(reward)
        if terminated:
            break
    rec["final_obs"] = obs
    return rec


def _write_demo(data: h5py.Group, name: str, rec: dict[str, Any], env: RobosuiteEnv) -> int:
    g = data.create_group(name)
    n = len(rec["actions"])
    for key in rec["obs"][0]:
        seq = np.stack([o[key] for o in rec["obs"]] + [rec["final_obs"][key]])
        g.create_dataset(f"obs/{key}", data=seq[:-1])
        g.create_dataset(f"next_obs/{key}", data=seq[1:])
    g.create_dataset("states", data=np.stack(rec["states"]))
    g.create_dataset("actions", data=np.stack(rec["actions"]).astype(np.float64))
    g.create_dataset("rewards", data=np.asarray(rec["rewards"], dtype=np.float64))
    dones = np.zeros(n, np.int64)
    dones[-1] = 1
    g.create_dataset("dones", data=dones)
    g.attrs["num_samples"] = n
    g.attrs["model_file"] = env.rs.sim.model.get_xml()
    g.attrs["ep_meta"] = json.dumps(env.rs.get_ep_meta())
    return n


def write_operator_demos(
    path: str | os.PathLike, task: str, seeds: Sequence[int], max_steps: int | Sequence[int] | None = None
) -> list[bool]:
    """Record the scripted operator of ``task`` once per seed into a robomimic HDF5 file at ``path``.

    ``max_steps`` (one value, or one per seed) cuts demos short, so a file can hold failures too.
    Returns each demo's success.
    """
    env = RobosuiteEnv(task)
    op = make_operator(task)
    limits = [max_steps] * len(seeds) if max_steps is None or isinstance(max_steps, int) else list(max_steps)
    successes, total = [], 0
    with h5py.File(path, "w", locking=False) as f:
        data = f.create_group("data")
        for i, (seed, limit) in enumerate(zip(seeds, limits, strict=True)):
            rec = _record_demo(env, op, int(seed), int(limit or env.max_steps))
            total += _write_demo(data, f"demo_{i}", rec, env)
            successes.append(bool(rec["rewards"][-1] > 0))
        data.attrs["total"] = total
        data.attrs["env_args"] = json.dumps(env_meta_of(env))
        f.create_dataset("mask/train", data=np.array([f"demo_{i}" for i in range(len(seeds))], dtype="S"))
    env.close()
    return successes


def replay_demo(env: RobosuiteEnv, demo: h5py.Group, use_model_file: bool = True) -> bool:
    """Replay ``demo``'s actions from its first stored state (and its ``model_file`` unless
    ``use_model_file`` is off, when the env's own model must match); whether it succeeded."""
    model_xml = str(demo.attrs["model_file"]) if use_model_file and "model_file" in demo.attrs else None
    env.reset_to(demo["states"][0], model_xml=model_xml)
    for action in demo["actions"][()]:
        if env.step(action)[4]["success"]:
            return True
    return False


def demo_success(demo: h5py.Group) -> bool:
    """Whether a stored demo succeeded (robomimic's sparse reward: positive on successful steps)."""
    return bool(np.max(demo["rewards"][()]) > 0)
