"""``rewind-collect``: record scripted-operator demos into a replay store.

rewind-collect env=stack3 episodes=100 out=PATH
"""

from __future__ import annotations

from typing import Any

from rewind.cli.app import hydra_command
from rewind.collect import CollectConfig, run_collect


@hydra_command(config_name="collect")
def main(cfg: CollectConfig) -> dict[str, Any]:
    """Record scripted-operator demos into a replay store (failed demos are counted, not stored)."""
    return run_collect(cfg)


if __name__ == "__main__":
    main()
