"""Contacts: which objects the gripper holds, and state edits that keep geoms apart (perturbations)."""

from __future__ import annotations

from collections.abc import Callable

import mujoco

from rewind.envs.core.base import TaskEnv

#: A perturbation that would push geoms this much deeper into each other (m) is refused.
PENETRATION_TOL = 0.003


def held_objects(env: TaskEnv) -> list[str]:
    """Task objects that both finger pads touch (i.e. objects in a closed grasp)."""
    m, d = env.model, env.data
    fl, fr = m.geom("finger_left").id, m.geom("finger_right").id
    bodies = {m.body(n).id: n for n in env.object_names}
    touch: dict[str, set[int]] = {}
    for i in range(d.ncon):
        g1, g2 = int(d.contact.geom1[i]), int(d.contact.geom2[i])
        for f, o in ((g1, g2), (g2, g1)):
            name = bodies.get(int(m.geom_bodyid[o]))
            if f in (fl, fr) and name is not None:
                touch.setdefault(name, set()).add(f)
    return [n for n in env.object_names if len(touch.get(n, ())) == 2]


def _min_contact_dist(data: mujoco.MjData) -> float:
    return float(data.contact.dist[: data.ncon].min()) if data.ncon else 0.0


def apply_if_clear(env: TaskEnv, mutate: Callable[[], None]) -> bool:
    """Run ``mutate`` (which edits qpos/mocap); undo it if it drives geoms into each other. True if kept."""
    m, d = env.model, env.data
    saved = (d.qpos.copy(), d.qvel.copy(), d.mocap_pos.copy())
    before = _min_contact_dist(d)
    mutate()
    mujoco.mj_forward(m, d)
    if _min_contact_dist(d) >= min(before, 0.0) - PENETRATION_TOL:
        return True
    d.qpos[:], d.qvel[:], d.mocap_pos[:] = saved
    mujoco.mj_forward(m, d)
    return False
