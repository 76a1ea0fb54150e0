"""Shared pytest set-up: headless MuJoCo rendering (must be set before mujoco is imported)."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import rewind  # noqa: E402, F401  (preloads triton before OSMesa; see rewind/__init__.py)
