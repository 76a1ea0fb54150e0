"""``rewind-calibrate``: checkpoint library + conformal calibration of a failure score.

rewind-calibrate policy_path=RUN env=stack3 data_path=DEMO_STORE monitor=tide out_dir=PATH
"""

from __future__ import annotations

from typing import Any

from rewind.cli.app import hydra_command
from rewind.monitor.calibrate import CalibrateConfig, run_calibrate


@hydra_command(config_name="calibrate")
def main(cfg: CalibrateConfig) -> dict[str, Any]:
    """Label rewind checkpoints in the demos and calibrate the score on successful rollouts."""
    return run_calibrate(cfg)


if __name__ == "__main__":
    main()
