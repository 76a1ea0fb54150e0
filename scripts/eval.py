"""``rewind-eval``: success rate (95% Wilson interval), stage histogram, videos of a trained policy.

rewind-eval policy_path=RUN/weights/step_005000 env=stack3 episodes=50 seed=0 out_dir=PATH
"""

from __future__ import annotations

from typing import Any

from rewind.utils.render import guard_command

guard_command("rewind-eval")  # MUJOCO_GL: chosen (or checked) before mujoco is imported, which reads it

from rewind.cli.app import hydra_command  # noqa: E402
from rewind.eval import EvalConfig, run_eval  # noqa: E402


@hydra_command(config_name="eval")
def main(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate policy weights on a task: lockstep batched rollouts, success with a 95% interval."""
    return run_eval(cfg)


if __name__ == "__main__":
    main()
