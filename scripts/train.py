"""``rewind-train``: train an action-chunk policy on a replay store.

rewind-train env=lift policy=diffusion data.path=STORE train.steps=5000 out_dir=PATH
rewind-train out_dir=PATH resume=true        (continue a killed run)
"""

from __future__ import annotations

from typing import Any

from rewind.cli.app import hydra_command
from rewind.train import TrainConfig, run_train


@hydra_command(config_name="train")
def main(cfg: TrainConfig) -> dict[str, Any]:
    """Train an action-chunk policy (diffusion, flow or ACT) on a replay store; resumable."""
    return run_train(cfg)


if __name__ == "__main__":
    main()
