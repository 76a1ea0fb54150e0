"""rewind: rewind-and-recover policy learning.

Importing the package sets two process-wide defaults before torch or MuJoCo start (both only when
the user has not set them):

* ``OMP_WAIT_POLICY=PASSIVE``: with the default spin-waiting, 2-thread torch runs on a busy 2-core
  machine were up to 10x slower than 1 thread (docs/policies.md).
* with ``MUJOCO_GL=osmesa``, triton is imported first: libOSMesa and triton each carry LLVM, and
  importing triton (diffusers -> torch._dynamo does) after MuJoCo has loaded OSMesa segfaults. So
  with OSMesa, ``import rewind`` before ``import mujoco`` (or use ``MUJOCO_GL=egl``).
"""

import contextlib as _contextlib
import logging as _logging
import os as _os
import sys as _sys

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if _os.environ.get("MUJOCO_GL") == "osmesa":
    if "mujoco" in _sys.modules:
        _logging.getLogger(__name__).warning(
            "mujoco was imported before rewind with MUJOCO_GL=osmesa: importing diffusers/triton later "
            "in this process may crash (both carry LLVM). Import rewind first, or use MUJOCO_GL=egl."
        )
    else:
        with _contextlib.suppress(ImportError):
            import triton as _triton  # noqa: F401

__version__ = "0.1.0"
