"""Shared pytest set-up: headless MuJoCo rendering (must be set before mujoco is imported)."""

import contextlib
import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

# libOSMesa and triton each carry their own LLVM: once MuJoCo has loaded OSMesa, importing triton
# (torch._dynamo does, e.g. when diffusers is imported) segfaults. Loading triton first is safe.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401
