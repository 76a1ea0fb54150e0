"""``rewind-loop``: the rewind-and-recover training loop.

rewind-loop                                          # the small default loop (PickPlace, two rounds)
rewind-loop env=stack3 recovery=operator rounds=3 episodes_per_round=30 finetune=ft
"""

from __future__ import annotations

from typing import Any

from rewind.cli.app import hydra_command
from rewind.loop import LoopConfig, run_loop


@hydra_command(config_name="loop")
def main(cfg: LoopConfig) -> dict[str, Any]:
    """Collect recovery data under the monitor, fine-tune, recalibrate and evaluate, round after round."""
    return run_loop(cfg)


if __name__ == "__main__":
    main()
