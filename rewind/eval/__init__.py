"""Evaluation of trained policies (``rewind-eval``): lockstep batched rollouts, success rate with a
Wilson interval, stage histogram, per-episode records, videos, rollouts into a store."""

from rewind.eval.config import EvalConfig, VideoConfig
from rewind.eval.runner import evaluate, run_eval
from rewind.eval.stats import stage_histogram, wilson_interval

__all__ = ["EvalConfig", "VideoConfig", "evaluate", "run_eval", "stage_histogram", "wilson_interval"]
