"""``rewind-monitor-eval``: AUROC, balanced accuracy, TPR/FPR, lead time and cost of failure detectors.

rewind-monitor-eval policy_path=RUN env=stack3 data_path=DEMO_STORE out_dir=PATH
"""

from __future__ import annotations

from typing import Any

from rewind.cli.app import hydra_command
from rewind.monitor.monitor_eval import MonitorEvalConfig, run_monitor_eval


@hydra_command(config_name="monitor_eval")
def main(cfg: MonitorEvalConfig) -> dict[str, Any]:
    """Compare failure detectors on the same rollouts, nominal and perturbed."""
    return run_monitor_eval(cfg)


if __name__ == "__main__":
    main()
