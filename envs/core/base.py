"""Base class of the rewind MuJoCo task suite.

Every task is a floating parallel-jaw gripper above a table plus task objects. The gripper follows a
mocap target through a weld constraint; the policy moves the target with bounded deltas.

Action ``a`` (float32 ``[5]``, every entry in ``[-1, 1]``):

====  ===========================================================  =========================
idx   meaning                                                      units at ``|a| = 1``
====  ===========================================================  =========================
0-2   change of the gripper target position x, y, z (world frame)   ``MAX_DPOS`` = 0.02 m/step
3     change of the gripper target yaw (wraps through +-pi)         ``MAX_DYAW`` = 0.15 rad/step
4     finger command (absolute, not a delta): -1 closed, +1 open    opening 0 .. 0.09 m
====  ===========================================================  =========================

At 20 Hz the translation limit is 0.4 m/s. The target is kept inside the workspace box and within
``MAX_LEAD`` of the actual gripper position, so a blocked gripper never winds up.

Observations are a dict of float32 vectors (see :meth:`TaskEnv._low_dim_obs`), plus ``rgb``
(uint8 ``[H, W, 3]``) when the env is made with ``rgb=True``.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np

from rewind.envs.core.mjcf import FINGER_STROKE, N_SUBSTEPS
from rewind.envs.core.snapshot import STATE_SIG, SnapshotMixin

MAX_DPOS = 0.02
MAX_DYAW = 0.15
MAX_LEAD = 0.04
WORKSPACE_LOW = np.array([-0.35, -0.35, 0.0])
WORKSPACE_HIGH = np.array([0.35, 0.35, 0.35])
ACT_DIM = 5
#: A generalized coordinate beyond this magnitude (m) means the simulation has blown up.
MAX_ABS_QPOS = 10.0
_BAD_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
)
_BAD_WARNING_IDX = np.array([int(w) for w in _BAD_WARNINGS])


def _close_renderers(box: list) -> None:
    """Close the renderer held in ``box`` (run by a weakref finalizer: on close, collection or exit)."""
    while box:
        r = box.pop()
        try:
            r.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the GL bindings may already be gone
            pass


class ActionError(ValueError):
    """An action of the wrong shape, or with NaN/inf entries, was passed to ``step``."""


def yaw_quat(yaw: float) -> np.ndarray:
    """Quaternion (w, x, y, z) of a rotation by ``yaw`` about world z."""
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def quat_yaw(q: np.ndarray) -> float:
    """Yaw (rotation about world z) of quaternion ``q`` (w, x, y, z)."""
    w, x, y, z = q
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


class TaskEnv(SnapshotMixin, gym.Env):
    """A MuJoCo manipulation task with named stages and exact snapshot/restore (:class:`SnapshotMixin`).

    Subclasses set ``task_name``, ``stage_names``, ``object_names`` and implement
    :meth:`_scene_xml`, :meth:`_randomize` and :meth:`_compute_stage`.
    ``info["stage"]`` is the index of the current stage (``len(stage_names)`` once the task is done),
    computed from the state each step, so it can move backwards (an object dropped, say).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}
    task_name: ClassVar[str] = ""
    stage_names: ClassVar[tuple[str, ...]] = ()
    object_names: ClassVar[tuple[str, ...]] = ()
    default_max_steps: ClassVar[int] = 200

    def __init__(
        self,
        max_steps: int | None = None,
        rgb: bool = False,
        image_size: int = 128,
        camera: str = "front",
        render_mode: str | None = "rgb_array",
    ) -> None:
        self.max_steps = int(max_steps or self.default_max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1; got {self.max_steps}")
        self.model = mujoco.MjModel.from_xml_string(self._scene_xml())
        self.data = mujoco.MjData(self.model)
        self.render_mode = render_mode
        self._rgb, self._image_size, self._camera = bool(rgb), int(image_size), camera
        self._renderer: mujoco.Renderer | None = None
        # The renderer is closed by a finalizer (at close(), garbage collection or interpreter exit, before
        # module teardown), so an env that was never closed does not print an exception at shutdown.
        self._renderer_box: list[mujoco.Renderer] = []
        self._finalizer = weakref.finalize(self, _close_renderers, self._renderer_box)
        self._bind_indices()
        self._rng = np.random.default_rng()
        self._step_count = 0
        self._target_yaw = 0.0
        self._friction_scale = 1.0
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(ACT_DIM,), dtype=np.float32)
        self.observation_space = self._make_obs_space()
        self.state_dim = mujoco.mj_stateSize(self.model, STATE_SIG)
        self._state_buf = np.empty(self.state_dim)

    # ----------------------------------------------------------------- task hooks
    def _scene_xml(self) -> str:
        """Full MJCF of the task (use :func:`rewind.envs.core.mjcf.build_scene`)."""
        raise NotImplementedError

    def _randomize(self, rng: np.random.Generator) -> None:
        """Place the task objects for a new episode (write their free-joint qpos)."""
        raise NotImplementedError

    def _compute_stage(self) -> int:
        """Index of the current stage from the state; ``len(stage_names)`` when the task is done."""
        raise NotImplementedError

    # ----------------------------------------------------------------- set-up
    def _bind_indices(self) -> None:
        m = self.model
        self._grip_qadr = m.jnt_qposadr[m.joint("gripper_free").id]
        self._finger_qadr = np.array([m.jnt_qposadr[m.joint(n).id] for n in ("finger_left", "finger_right")])
        self._finger_geoms = np.array([m.geom(n).id for n in ("finger_left", "finger_right")])
        self._finger_friction0 = m.geom_friction[self._finger_geoms].copy()
        self._obj_qadr = {n: int(m.jnt_qposadr[m.joint(n).id]) for n in self.object_names}
        self._obj_dofadr = {n: int(m.jnt_dofadr[m.joint(n).id]) for n in self.object_names}

    def _make_obs_space(self) -> gym.spaces.Dict:
        spaces: dict[str, gym.spaces.Space] = {
            k: gym.spaces.Box(-np.inf, np.inf, shape=v.shape, dtype=np.float32)
            for k, v in self._low_dim_obs().items()
        }
        if self._rgb:
            s = self._image_size
            spaces["rgb"] = gym.spaces.Box(0, 255, shape=(s, s, 3), dtype=np.uint8)
        return gym.spaces.Dict(spaces)

    # ----------------------------------------------------------------- state access
    def gripper_pos(self) -> np.ndarray:
        """Gripper origin (between the finger pads, at the fingertip line + 14 mm), world frame [3]."""
        a = self._grip_qadr
        return self.data.qpos[a : a + 3]

    def gripper_yaw(self) -> float:
        """Yaw of the gripper body (rad)."""
        a = self._grip_qadr
        return quat_yaw(self.data.qpos[a + 3 : a + 7])

    def gripper_opening(self) -> float:
        """Distance between the finger pads (m), 0 .. 2 * FINGER_STROKE."""
        return float(self.data.qpos[self._finger_qadr].sum())

    def object_pos(self, name: str) -> np.ndarray:
        """Position of object ``name`` [3] (a view into qpos)."""
        a = self._obj_qadr[name]
        return self.data.qpos[a : a + 3]

    def object_quat(self, name: str) -> np.ndarray:
        """Orientation (w, x, y, z) of object ``name`` [4] (a view into qpos)."""
        a = self._obj_qadr[name]
        return self.data.qpos[a + 3 : a + 7]

    def target_pos(self) -> np.ndarray:
        """The mocap target position the gripper follows [3]."""
        return self.data.mocap_pos[0]

    @property
    def target_yaw(self) -> float:
        """The commanded gripper yaw (rad, wrapped to (-pi, pi]) that the mocap target holds."""
        return self._target_yaw

    def stage(self) -> int:
        """Index of the current stage (``num_stages`` once the task is done)."""
        return self._compute_stage()

    @property
    def num_stages(self) -> int:
        """Number of named stages of the task."""
        return len(self.stage_names)

    def is_success(self) -> bool:
        """Whether every stage is complete."""
        return self._compute_stage() >= self.num_stages

    # ----------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode with object poses drawn from the env's seeded generator."""
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        mujoco.mj_resetData(self.model, self.data)
        self._set_finger_friction(1.0)
        self._step_count = 0
        self._randomize(self._rng)
        self._target_yaw = 0.0
        self.data.mocap_pos[0] = self.gripper_pos()
        self.data.mocap_quat[0] = yaw_quat(0.0)
        self.data.ctrl[:] = FINGER_STROKE
        self.data.qpos[self._finger_qadr] = FINGER_STROKE
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), self._info(sim_error=None)

    def step(self, action: np.ndarray):
        """Apply one control step (``N_SUBSTEPS`` physics steps). See the module doc for units."""
        a = self._check_action(action)
        self._apply_action(a)
        self.data.warning.number[:] = 0  # report only this step's warnings
        mujoco.mj_step(self.model, self.data, nstep=N_SUBSTEPS)
        self._step_count += 1
        sim_error = self._sim_error()
        stage = -1 if sim_error else self._compute_stage()
        success = stage >= self.num_stages
        terminated = bool(success or sim_error)
        truncated = self._step_count >= self.max_steps and not terminated
        info = self._info(sim_error=sim_error, stage=stage)
        return self._obs(), float(success), terminated, truncated, info

    def _check_action(self, action: np.ndarray) -> np.ndarray:
        a = np.array(action, dtype=np.float64)  # a copy: clipped in place below
        if a.shape != (ACT_DIM,):
            raise ActionError(f"action must have shape ({ACT_DIM},) for {self.task_name}; got {a.shape}")
        if not np.isfinite(a).all():
            raise ActionError(f"action has non-finite entries: {a.tolist()}")
        return np.minimum(np.maximum(a, -1.0, out=a), 1.0, out=a)

    def _apply_action(self, a: np.ndarray) -> None:
        # Same arithmetic as np.clip (maximum, then minimum), with fewer temporaries: this is the hot path.
        d = self.data
        grip = self.gripper_pos()
        t = d.mocap_pos[0] + a[:3] * MAX_DPOS
        np.minimum(np.maximum(t, grip - MAX_LEAD, out=t), grip + MAX_LEAD, out=t)
        np.minimum(np.maximum(t, WORKSPACE_LOW, out=t), WORKSPACE_HIGH, out=t)
        d.mocap_pos[0] = t
        # The target yaw wraps to (-pi, pi]: a turn through +-pi continues the short way round. The
        # mocap quaternion only changes sign at the wrap (the same rotation), so the weld does not jump.
        yaw = self._target_yaw + float(a[3]) * MAX_DYAW
        if yaw > math.pi:
            yaw -= 2.0 * math.pi
        elif yaw <= -math.pi:
            yaw += 2.0 * math.pi
        self._target_yaw = yaw
        q = d.mocap_quat[0]
        q[0], q[1], q[2], q[3] = math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)
        d.ctrl[:] = (float(a[4]) + 1.0) * 0.5 * FINGER_STROKE

    def _sim_error(self) -> str | None:
        d = self.data
        if d.warning.number[_BAD_WARNING_IDX].any():
            for w in _BAD_WARNINGS:
                if d.warning[w].number > 0:
                    return f"MuJoCo warning {mujoco.mjtWarning(w).name} at step {self._step_count}"
        # NaN fails the <= comparison, so one reduction per array covers NaN, inf and blow-ups.
        if np.isfinite(d.qvel).all() and np.abs(d.qpos).max() <= MAX_ABS_QPOS:
            return None
        if not np.isfinite(d.qpos).all() or not np.isfinite(d.qvel).all():
            return f"non-finite physics state at step {self._step_count}"
        return f"physics state out of bounds (|qpos| > {MAX_ABS_QPOS}) at step {self._step_count}"

    def _info(self, sim_error: str | None, stage: int | None = None) -> dict[str, Any]:
        stage = self._compute_stage() if stage is None else stage
        info: dict[str, Any] = {
            "stage": stage,
            "stage_name": self.stage_names[stage] if 0 <= stage < self.num_stages else "done",
            "success": stage >= self.num_stages,
            "step": self._step_count,
        }
        if sim_error:
            info["sim_error"] = sim_error
        return info

    # ----------------------------------------------------------------- observations
    def _low_dim_obs(self) -> dict[str, np.ndarray]:
        """Gripper pose and opening, then each object's pose and its offset from the gripper."""
        grip = self.gripper_pos()
        yaw = self.gripper_yaw()
        obs = {
            "eef_pos": grip.astype(np.float32),
            "eef_yaw": np.array([math.cos(yaw), math.sin(yaw)], dtype=np.float32),
            "gripper": np.array([self.gripper_opening()], dtype=np.float32),
        }
        for n in self.object_names:
            p = self.object_pos(n)
            q = self.object_quat(n)
            obs[f"{n}_pos"] = p.astype(np.float32)
            obs[f"{n}_quat"] = (q if q[0] >= 0 else -q).astype(np.float32)
            obs[f"{n}_to_eef"] = (p - grip).astype(np.float32)
        return obs

    def _obs(self) -> dict[str, np.ndarray]:
        obs = self._low_dim_obs()
        if self._rgb:
            obs["rgb"] = self.render_camera(self._camera, self._image_size)
        return obs

    def render_camera(self, camera: str, size: int) -> np.ndarray:
        """Render ``camera`` to a uint8 ``[size, size, 3]`` image (headless: set MUJOCO_GL)."""
        if self._renderer is None or self._renderer.height != size:
            self.close()
            self._renderer = mujoco.Renderer(self.model, size, size)
            self._renderer_box.append(self._renderer)
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render()

    def render(self) -> np.ndarray | None:
        """Gymnasium render: an RGB frame from the front camera."""
        if self.render_mode != "rgb_array":
            return None
        return self.render_camera(self._camera, max(self._image_size, 256))

    def close(self) -> None:
        """Release the renderer."""
        _close_renderers(self._renderer_box)
        self._renderer = None

    # ----------------------------------------------------------------- rewind
    # (snapshot() and restore() come from SnapshotMixin, envs/core/snapshot.py)
    @property
    def elapsed_steps(self) -> int:
        """Control steps taken in this episode (a :meth:`restore` sets it back)."""
        return self._step_count

    def observation(self) -> dict[str, np.ndarray]:
        """The observation of the current state (e.g. after :meth:`restore`)."""
        return self._obs()

    def physics_state(self) -> np.ndarray:
        """The flat MuJoCo integration state (float64 ``[state_dim]``), as stored per step."""
        mujoco.mj_getState(self.model, self.data, self._state_buf, STATE_SIG)
        return self._state_buf.copy()

    def set_physics_state(self, state: np.ndarray) -> None:
        """Set the physics from a stored per-step state (the env's RNG and counters are kept)."""
        state = np.asarray(state, dtype=np.float64)
        if state.shape != (self.state_dim,):
            raise ValueError(f"physics state must have shape ({self.state_dim},); got {state.shape}")
        mujoco.mj_setState(self.model, self.data, state, STATE_SIG)
        self.data.warning.number[:] = 0
        self._target_yaw = quat_yaw(self.data.mocap_quat[0])
        mujoco.mj_forward(self.model, self.data)

    # ----------------------------------------------------------------- perturbation hooks
    def _set_finger_friction(self, scale: float) -> None:
        self._friction_scale = float(scale)
        self.model.geom_friction[self._finger_geoms] = self._finger_friction0 * scale

    def set_finger_friction(self, scale: float) -> None:
        """Scale the finger pads' friction (1.0 = nominal); part of the snapshot."""
        if not scale >= 0.0:
            raise ValueError(f"friction scale must be >= 0; got {scale}")
        self._set_finger_friction(scale)

    def nudge_object(self, name: str, dxy: np.ndarray) -> None:
        """Displace object ``name`` by ``dxy`` (m) in the table plane, as a person's nudge would."""
        a = self._obj_qadr[name]
        self.data.qpos[a : a + 2] += np.asarray(dxy, dtype=np.float64)[:2]
        mujoco.mj_forward(self.model, self.data)

    def push_gripper(self, dpos: np.ndarray) -> None:
        """Shift the gripper and its target by ``dpos`` (m), as an external push would."""
        dpos = np.asarray(dpos, dtype=np.float64)
        a = self._grip_qadr
        self.data.qpos[a : a + 3] += dpos
        self.data.mocap_pos[0] += dpos
        mujoco.mj_forward(self.model, self.data)
