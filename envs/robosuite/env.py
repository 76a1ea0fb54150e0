"""Gymnasium env over a robosuite task, with rewind's contract: stages, exact snapshot/restore.

Observation (dict of float32 vectors, robomimic's low-dim keys): ``robot0_eef_pos`` [3],
``robot0_eef_quat`` [4] (x, y, z, w), ``robot0_gripper_qpos`` [2] and ``object`` (robosuite's
``object-state``: Lift [10], Can [14], Square [14]). Each is computed by robosuite's own sensors from
the current MuJoCo state (as robomimic's ``reset_to`` and dataset conversion do), so an observation
is a function of the state. (robosuite's ``step`` returns values its observables sampled one
physics substep into the step, and its relative object sensors read the object pose of the previous
update from a cache; here every value describes the state reached.)

Action (float32 ``[7]`` in ``[-1, 1]``): OSC_POSE deltas, robosuite's default scaling (0.05 m and
0.5 rad per step at ``|a| = 1``), in the controller's ``input_ref_frame``, then the gripper
(-1 open, +1 close; the Panda ramps its command by 0.2 per step).

``step`` runs robosuite's control loop (``MujocoEnv.step``: step1, ``_pre_action``, step2 per
substep, lite physics or not) without the per-substep observable updates, then one ``mj_forward``
so contacts, stages and observations describe the state reached. The env is built once with
``hard_reset=False`` (Lift's cube size is drawn once, from ``model_seed``); ``reset(seed=s)``
reseeds robosuite's own generator, which places the objects and adds the robot's joint noise.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np

from rewind.envs.robosuite.compat import require_robosuite
from rewind.envs.robosuite.controller import (
    capture_controllers,
    restore_controllers,
    robosuite_kwargs,
)
from rewind.envs.robosuite.rotations import quat_xyzw_to_mat, rotvec
from rewind.envs.robosuite.tasks import OBS_KEYS, get_task

logger = logging.getLogger(__name__)

#: OSC_POSE's default output scale: metres and radians per step at ``|a| = 1``.
POS_SCALE = 0.05
ORI_SCALE = 0.5
_STATE_SIG = mujoco.mjtState.mjSTATE_INTEGRATION
_BAD_WARNINGS = np.array(
    [
        int(w)
        for w in (
            mujoco.mjtWarning.mjWARN_BADQACC,
            mujoco.mjtWarning.mjWARN_BADQPOS,
            mujoco.mjtWarning.mjWARN_BADQVEL,
        )
    ]
)


@dataclass(frozen=True)
class RobosuiteSnapshot:
    """An immutable, exactly restorable episode state of a :class:`RobosuiteEnv`.

    Attributes:
        physics: the MuJoCo integration state (``mjSTATE_INTEGRATION``), float64, read-only.
        rng_state: the bit-generator state of robosuite's own generator (``env.rng``).
        step_count: control steps taken in the episode.
        counters: robosuite's ``(timestep, cur_time)``.
        controllers: the robots' controller state (:func:`capture_controllers`).
        model_token: which compiled model the state belongs to (changes when a dataset's
            ``model_file`` is loaded).
    """

    physics: np.ndarray
    rng_state: dict[str, Any]
    step_count: int
    counters: tuple[int, float]
    controllers: tuple[Any, ...]
    model_token: int

    def __post_init__(self) -> None:
        if self.physics.flags.writeable:
            raise ValueError("RobosuiteSnapshot.physics must be a read-only array")


class RobosuiteEnv(gym.Env):
    """A robosuite task (``task``: ``Lift``, ``Can`` or ``Square``) behind rewind's env contract.

    ``info`` carries ``stage``, ``stage_name``, ``success``, ``step`` (and ``sim_error`` when the
    physics blew up), like the native tasks of :mod:`rewind.envs.core.base`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        task: str = "Lift",
        max_steps: int | None = None,
        robot: str = "Panda",
        controller_configs: dict[str, Any] | None = None,
        env_kwargs: dict[str, Any] | None = None,
        model_seed: int = 0,
        render_mode: str | None = "rgb_array",
        camera: str = "agentview",
        image_size: int = 256,
    ) -> None:
        suite = require_robosuite()
        self.task = get_task(task)
        self.max_steps = int(max_steps or self.task.max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1; got {self.max_steps}")
        self.stage_names = self.task.stage_names
        self.env_kwargs = robosuite_kwargs(robot, controller_configs, env_kwargs, model_seed)
        self.rs = suite.make(self.task.env_name, **self.env_kwargs)
        self.render_mode, self._camera, self._image_size = render_mode, camera, int(image_size)
        self._renderer: mujoco.Renderer | None = None
        self._model_token = 0
        self._step_count = 0
        self._bind()
        self.rs.reset()
        self._obs_order = self._observable_order()
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(self.rs.action_dim,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(
            {
                k: gym.spaces.Box(-np.inf, np.inf, shape=v.shape, dtype=np.float32)
                for k, v in self._obs().items()
            }
        )

    # ----------------------------------------------------------------- set-up
    def _bind(self) -> None:
        """Point at the current compiled model (again after a model_file was loaded)."""
        self.model = self.rs.sim.model._model
        self.data = self.rs.sim.data._data
        self.state_dim = mujoco.mj_stateSize(self.model, _STATE_SIG)
        self._n_substeps = int(round(self.rs.control_timestep / self.rs.model_timestep))
        self.close()

    def _observable_order(self) -> list[str]:
        """The robosuite observables behind :data:`OBS_KEYS`, in robosuite's order (sensors read the
        values computed before them from the cache)."""
        keep = set(OBS_KEYS[:3])
        return [
            n
            for n, o in self.rs._observables.items()
            if n in keep or (o.modality == "object" and o.is_enabled())
        ]

    # ----------------------------------------------------------------- state access
    @property
    def num_stages(self) -> int:
        """Number of named stages of the task."""
        return len(self.stage_names)

    def stage(self) -> int:
        """Index of the current stage (``num_stages`` once the task is done)."""
        return self.task.stage(self.rs)

    def is_success(self) -> bool:
        """Whether robosuite's success predicate holds."""
        return bool(self.rs._check_success())

    @property
    def elapsed_steps(self) -> int:
        """Control steps taken in this episode (a :meth:`restore` sets it back)."""
        return self._step_count

    def eef_pos(self) -> np.ndarray:
        """The gripper's grip site position, world frame [3]."""
        return np.array(self.data.site_xpos[self.rs.robots[0].eef_site_id["right"]])

    def eef_yaw(self) -> float:
        """Yaw of the grip site about world z (rad), from its x axis."""
        m = self.data.site_xmat[self.rs.robots[0].eef_site_id["right"]].reshape(3, 3)
        return math.atan2(m[1, 0], m[0, 0])

    def object_pos(self) -> np.ndarray:
        """Position of the task's object (cube, can, nut) [3]."""
        obj = self.task.target(self.rs)
        return np.array(self.data.xpos[self.rs.sim.model.body_name2id(obj.root_body)])

    # ----------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode; ``seed`` reseeds robosuite's generator (object poses, joint noise)."""
        super().reset(seed=seed)
        if seed is not None:
            self.rs.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        self.rs.reset()
        self._step_count = 0
        mujoco.mj_forward(self.model, self.data)
        self._obs_order = self._observable_order()
        return self._obs(), self._info(None)

    def step(self, action: np.ndarray):
        """One control step (``control_freq`` Hz); see the module doc for the action."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}; got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"action has non-finite entries: {a.tolist()}")
        self.data.warning.number[:] = 0
        self._advance(np.clip(a, -1.0, 1.0))
        self._step_count += 1
        mujoco.mj_forward(self.model, self.data)
        sim_error = self._sim_error()
        stage = -1 if sim_error else self.stage()
        success = stage >= self.num_stages
        terminated = bool(success or sim_error)
        truncated = self._step_count >= self.max_steps and not terminated
        return self._obs(), float(success), terminated, truncated, self._info(sim_error, stage)

    def _advance(self, action: np.ndarray) -> None:
        """robosuite's ``MujocoEnv.step`` control loop, minus observables, reward and viewer."""
        rs, sim = self.rs, self.rs.sim
        rs.timestep += 1
        for i in range(self._n_substeps):
            sim.step1() if rs.lite_physics else sim.forward()
            rs._pre_action(action, i == 0)
            sim.step2() if rs.lite_physics else sim.step()
        rs.cur_time += rs.control_timestep

    def _sim_error(self) -> str | None:
        d = self.data
        if d.warning.number[_BAD_WARNINGS].any():
            return f"MuJoCo warning at step {self._step_count}"
        if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
            return f"non-finite physics state at step {self._step_count}"
        return None

    def _info(self, sim_error: str | None, stage: int | None = None) -> dict[str, Any]:
        stage = self.stage() if stage is None else stage
        info: dict[str, Any] = {
            "stage": stage,
            "stage_name": self.stage_names[stage] if 0 <= stage < self.num_stages else "done",
            "success": stage >= self.num_stages,
            "step": self._step_count,
        }
        if sim_error:
            info["sim_error"] = sim_error
        return info

    def _obs(self) -> dict[str, np.ndarray]:
        cache: dict[str, Any] = {}
        observables = self.rs._observables
        # Two passes: robosuite lists relative sensors (Can_to_robot0_eef_pos) before the object pose
        # they read from the cache, so one pass would pair this state's gripper with a stale object.
        for name in self._obs_order + self._obs_order:
            observables[name].update(timestep=0.0, obs_cache=cache, force=True)
        obs = {k: np.asarray(cache[k], dtype=np.float32) for k in OBS_KEYS[:3]}
        parts = [
            np.atleast_1d(cache[n])
            for n in self._obs_order
            if observables[n].modality == "object" and observables[n].is_active()
        ]
        obs["object"] = np.concatenate(parts).astype(np.float32)
        return obs

    def observation(self) -> dict[str, np.ndarray]:
        """The observation of the current state (e.g. after :meth:`restore`)."""
        return self._obs()

    # ----------------------------------------------------------------- drive rewind
    @staticmethod
    def grip_closed_at(checkpoint_obs: dict[str, np.ndarray], obs: dict[str, np.ndarray]) -> bool:
        """Whether the fingers were more closed at a checkpoint than now (a ``drive`` rewind closes them)."""

        def opening(o: dict[str, np.ndarray]) -> float:
            q = o["robot0_gripper_qpos"]
            return float(q[0]) - float(q[1])

        return opening(checkpoint_obs) < opening(obs) - 0.005

    def drive_action(
        self, checkpoint_obs: dict[str, np.ndarray], grip_closed: bool, pos_tol: float, ang_tol: float
    ) -> np.ndarray | None:
        """One OSC_POSE step of a ``drive`` rewind toward the gripper pose of ``checkpoint_obs``
        (``robot0_eef_pos`` / ``robot0_eef_quat``), fingers closed or open; ``None`` once within
        ``pos_tol`` (m) and ``ang_tol`` (rad)."""
        now = self._obs()
        pos_err = np.asarray(checkpoint_obs["robot0_eef_pos"], np.float64) - now["robot0_eef_pos"]
        target = quat_xyzw_to_mat(checkpoint_obs["robot0_eef_quat"])
        rot_err = rotvec(target @ quat_xyzw_to_mat(now["robot0_eef_quat"]).T)
        if np.linalg.norm(pos_err) < pos_tol and np.linalg.norm(rot_err) < ang_tol:
            return None
        a = np.zeros(self.action_space.shape, dtype=np.float32)
        a[:3] = np.clip(pos_err / POS_SCALE, -1.0, 1.0)
        a[3:6] = np.clip(rot_err / ORI_SCALE, -1.0, 1.0)
        a[6] = 1.0 if grip_closed else -1.0
        return a

    # ----------------------------------------------------------------- rendering
    def render_camera(self, camera: str, size: int) -> np.ndarray:
        """Render ``camera`` to a uint8 ``[size, size, 3]`` image (headless: set MUJOCO_GL)."""
        if self._renderer is None or self._renderer.height != size:
            self.close()
            self._renderer = mujoco.Renderer(self.model, size, size)
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render()

    def render(self) -> np.ndarray | None:
        """Gymnasium render: an RGB frame from ``camera`` (robosuite's ``agentview`` by default)."""
        if self.render_mode != "rgb_array":
            return None
        return self.render_camera(self._camera, self._image_size)

    def close(self) -> None:
        """Release the renderer."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ----------------------------------------------------------------- rewind
    def snapshot(self) -> RobosuiteSnapshot:
        """Capture simulator, controller and RNG state; :meth:`restore` brings it back bit-exactly."""
        physics = np.empty(self.state_dim)
        mujoco.mj_getState(self.model, self.data, physics, _STATE_SIG)
        physics.flags.writeable = False
        return RobosuiteSnapshot(
            physics=physics,
            rng_state=self.rs.rng.bit_generator.state,
            step_count=self._step_count,
            counters=(self.rs.timestep, self.rs.cur_time),
            controllers=capture_controllers(self.rs.robots),
            model_token=self._model_token,
        )

    def restore(self, snap: RobosuiteSnapshot) -> None:
        """Return to ``snap``: the same actions afterwards give bit-identical observations."""
        if snap.model_token != self._model_token:
            raise ValueError(
                "snapshot belongs to another compiled model (a dataset's model_file was loaded since)"
            )
        mujoco.mj_setState(self.model, self.data, snap.physics, _STATE_SIG)
        self.data.warning.number[:] = 0
        self.rs.rng.bit_generator.state = snap.rng_state
        self._step_count = snap.step_count
        self.rs.timestep, self.rs.cur_time = snap.counters
        self.rs.done = False
        restore_controllers(self.rs.robots, snap.controllers)
        mujoco.mj_forward(self.model, self.data)

    def physics_state(self) -> np.ndarray:
        """The flat MuJoCo integration state (float64 ``[state_dim]``), as stored per step."""
        state = np.empty(self.state_dim)
        mujoco.mj_getState(self.model, self.data, state, _STATE_SIG)
        return state

    def robomimic_state(self) -> np.ndarray:
        """robosuite's flattened state ``[time, qpos, qvel]``: what robomimic datasets store."""
        return np.asarray(self.rs.sim.get_state().flatten(), dtype=np.float64)

    def set_physics_state(self, state: np.ndarray) -> None:
        """Set the physics from a stored state: the integration state of :meth:`physics_state`, or
        robomimic's ``[time, qpos, qvel]``. Controllers, RNG and counters are kept (use
        :meth:`restore` for an exact rewind, :meth:`reset_to` to start an episode there)."""
        state = np.asarray(state, dtype=np.float64)
        flat_dim = 1 + self.model.nq + self.model.nv
        if state.shape == (self.state_dim,):
            mujoco.mj_setState(self.model, self.data, state, _STATE_SIG)
        elif state.shape == (flat_dim,):
            self.rs.sim.set_state_from_flattened(state)
        else:
            raise ValueError(
                f"physics state must have shape ({self.state_dim},) or robomimic's ({flat_dim},); got {state.shape}"
            )
        self.data.warning.number[:] = 0
        mujoco.mj_forward(self.model, self.data)

    def reset_to(self, state: np.ndarray, model_xml: str | None = None):
        """Start an episode at a stored state (a dataset demo's first state), as robomimic's
        ``reset_to`` does; ``model_xml`` (a demo's ``model_file``) rebuilds the model first. The
        controllers are rebuilt from the state, as at a reset. Returns ``(obs, info)``."""
        if model_xml is not None:
            self.rs.reset_from_xml_string(self.rs.edit_model_xml(model_xml))
            self._model_token += 1
            self._bind()
        self.set_physics_state(state)
        for robot in self.rs.robots:
            robot._load_controller()
            for arm in robot.arms:
                robot.gripper[arm].current_action = np.zeros(robot.gripper[arm].dof)
            robot.composite_controller.update_state()
            robot.composite_controller.reset()
        self.rs.timestep, self.rs.cur_time, self.rs.done = 0, 0.0, False
        self._step_count = 0
        mujoco.mj_forward(self.model, self.data)
        self._obs_order = self._observable_order()
        return self._obs(), self._info(None)
