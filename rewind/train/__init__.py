"""Training of action-chunk policies on a replay store (``rewind-train``).

    from rewind.train import TrainConfig, run_train
    summary = run_train(cfg)

See ``docs/training.md`` for the config fields, resume and the output folder layout.
"""

from rewind.train.config import DataConfig, OptimConfig, TrainConfig, policy_config
from rewind.train.run import run_train

__all__ = ["DataConfig", "OptimConfig", "TrainConfig", "policy_config", "run_train"]
