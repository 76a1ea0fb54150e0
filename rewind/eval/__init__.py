"""Evaluation of trained policies (``rewind-eval``): lockstep batched rollouts, success rate with a
Wilson interval, stage histogram, per-episode records, videos, rollouts into a store."""

# The policies (diffusers -> torch._dynamo -> triton) must load before MuJoCo loads libOSMesa
# (MUJOCO_GL=osmesa): both carry LLVM, and importing triton after OSMesa segfaults.
import rewind.policies.registry  # noqa: F401, I001

from rewind.eval.config import EvalConfig, VideoConfig
from rewind.eval.runner import evaluate, run_eval
from rewind.eval.stats import stage_histogram, wilson_interval

__all__ = ["EvalConfig", "VideoConfig", "evaluate", "run_eval", "stage_histogram", "wilson_interval"]
