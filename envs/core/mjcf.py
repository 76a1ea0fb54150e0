"""MJCF assembly for the rewind task suite: table, floating parallel-jaw gripper, task bodies.

All models are written here (no downloaded assets). A task contributes the XML of its objects and
fixtures; :func:`build_scene` wraps them in the shared world (table plane, lights, cameras, gripper).

Units: metres, kilograms, seconds, radians. The table surface is the plane z = 0.
"""

from __future__ import annotations

#: Physics timestep (s). Control runs at ``1 / (TIMESTEP * N_SUBSTEPS)`` = 20 Hz.
TIMESTEP = 0.002
#: Physics substeps per control step.
N_SUBSTEPS = 25
#: Half-stroke of one finger (m): each finger slides from 0 (closed) to this (open).
FINGER_STROKE = 0.045


# The finger pads have contact priority 1, so a pad contact takes the pad's own friction rather than
# the larger of the two geoms' (MuJoCo's default mixing). With every object's friction below the
# pads' 2.0 this changes nothing nominally, and it lets ``set_finger_friction`` actually make a
# grasp slip.
def _finger(side: str, sign: int) -> str:
    """One finger: a pad sliding along +-y from closed (0) to open (FINGER_STROKE)."""
    return f"""      <body name="finger_{side}" pos="0 0 0" gravcomp="1">
        <joint name="finger_{side}" type="slide" axis="0 {sign} 0" range="0 {FINGER_STROKE}" damping="2"
               armature="0.01"/>
        <inertial pos="0 0 0.02" mass="0.05" diaginertia="1e-5 1e-5 1e-5"/>
        <geom name="finger_{side}" type="box" size="0.012 0.006 0.032" pos="0 {0.006 * sign} 0.018"
              friction="2.0 0.02 0.002" condim="4" priority="1" rgba="0.55 0.55 0.6 1" contype="2"
              conaffinity="1" solimp="0.95 0.99 0.001" solref="0.004 1"/>
      </body>"""


_GRIPPER_XML = f"""
    <body name="gripper_target" mocap="true" pos="0 0 0.25">
      <site name="target_site" size="0.004" rgba="1 0 0 0.3" group="5"/>
    </body>
    <body name="gripper" pos="0 0 0.25" gravcomp="1">
      <freejoint name="gripper_free"/>
      <inertial pos="0 0 0.04" mass="0.5" diaginertia="0.002 0.002 0.002"/>
      <geom name="palm" type="box" size="0.012 0.06 0.012" pos="0 0 0.06" rgba="0.25 0.25 0.28 1"
            contype="2" conaffinity="1"/>
      <geom name="wrist" type="cylinder" size="0.018 0.03" pos="0 0 0.1" rgba="0.3 0.3 0.33 1"
            contype="2" conaffinity="1"/>
      <site name="grip_site" pos="0 0 0.0" size="0.004" rgba="0 1 0 0.4" group="5"/>
{_finger("left", 1)}
{_finger("right", -1)}
    </body>
"""

_ACTUATOR_XML = """
  <actuator>
    <position name="finger_left" joint="finger_left" kp="600" ctrlrange="0 {stroke}" forcerange="-25 25"/>
    <position name="finger_right" joint="finger_right" kp="600" ctrlrange="0 {stroke}" forcerange="-25 25"/>
  </actuator>
  <equality>
    <weld name="gripper_weld" body1="gripper_target" body2="gripper"
          solref="0.01 1" solimp="0.95 0.99 0.001"/>
  </equality>
"""


def build_scene(task_name: str, bodies_xml: str, assets_xml: str = "") -> str:
    """Return the full MJCF document for a task.

    Args:
        task_name: model name, for MuJoCo error messages.
        bodies_xml: ``<body>`` elements of the task's objects and fixtures (children of worldbody).
        assets_xml: optional extra ``<asset>`` children (materials, textures).
    """
    return f"""
<mujoco model="rewind_{task_name}">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"
          noslip_iterations="0"/>
  <size memory="4M"/>
  <visual>
    <global offwidth="640" offheight="640"/>
    <quality shadowsize="1024"/>
  </visual>
  <default>
    <geom solref="0.004 1" solimp="0.95 0.99 0.001"/>
  </default>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.82 0.8 0.76" rgb2="0.74 0.72 0.68"
             width="256" height="256"/>
    <material name="table" texture="grid" texrepeat="8 8" reflectance="0.05"/>
    {assets_xml}
  </asset>
  <worldbody>
    <light name="key" pos="0.3 -0.4 1.2" dir="-0.3 0.4 -1" diffuse="0.8 0.8 0.8" castshadow="true"/>
    <light name="fill" pos="-0.4 0.4 1.0" dir="0.4 -0.4 -1" diffuse="0.35 0.35 0.35" castshadow="false"/>
    <geom name="table" type="plane" size="0.6 0.6 0.02" material="table" friction="1.0 0.005 0.0001"
          contype="1" conaffinity="1"/>
    <camera name="front" pos="0.0 -0.72 0.62" xyaxes="1 0 0 0 0.68 0.73" fovy="45"/>
    <camera name="top" pos="0 0 0.9" xyaxes="1 0 0 0 1 0" fovy="50"/>
{_GRIPPER_XML}
{bodies_xml}
  </worldbody>
{_ACTUATOR_XML.format(stroke=FINGER_STROKE)}
</mujoco>
"""


def box_body(name: str, half: float, rgba: str, mass: float = 0.08, pos: str = "0 0 0.05") -> str:
    """A free cube of half-size ``half`` named ``name`` (body, joint and geom share the name)."""
    return f"""
    <body name="{name}" pos="{pos}">
      <freejoint name="{name}"/>
      <geom name="{name}" type="box" size="{half} {half} {half}" rgba="{rgba}" mass="{mass}"
            friction="1.2 0.01 0.001" condim="4" contype="1" conaffinity="3"/>
    </body>"""
