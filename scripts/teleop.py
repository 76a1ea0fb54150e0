"""``rewind-teleop``: watch a monitored rollout in the browser, take over, rewind, record corrections.

rewind-teleop env=lift policy_path=RUN calibration=CAL store=PATH   (then open the printed URL)
"""

from __future__ import annotations

from typing import Any

from rewind.utils.render import guard_command

guard_command("rewind-teleop")  # MUJOCO_GL: chosen (or checked) before mujoco is imported, which reads it

from rewind.cli.app import hydra_command  # noqa: E402
from rewind.teleop import TeleopConfig, run_teleop  # noqa: E402


@hydra_command(config_name="teleop")
def main(cfg: TeleopConfig) -> dict[str, Any]:
    """Serve the teleop intervention page: live view, monitor alarms, rewind, take over, record."""
    return run_teleop(cfg)


if __name__ == "__main__":
    main()
