"""Shared pytest set-up: headless MuJoCo rendering (must be set before mujoco is imported)."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")
