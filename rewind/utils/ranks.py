"""This process's place in a ``torchrun`` launch, read from the variables torchrun sets (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``). No torch import: the command layer (``rewind.cli.app``) reads it to
let rank 0 alone write the run folder; ``rewind.train.distributed`` starts the process group from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rewind.config import ConfigError


@dataclass(frozen=True)
class LaunchRanks:
    """``rank`` of ``world_size`` processes; ``local_rank`` on this machine (its GPU index)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files, metrics and W&B."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise ConfigError(f"environment variable {name} must be an integer; got '{text}'") from exc


def launch_ranks() -> LaunchRanks:
    """The ranks torchrun gave this process (a plain process: rank 0 of 1).

    Raises:
        ConfigError: a malformed or inconsistent ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``.
    """
    ranks = LaunchRanks(_env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0))
    if ranks.world_size < 1 or not 0 <= ranks.rank < ranks.world_size or ranks.local_rank < 0:
        raise ConfigError(
            f"torchrun environment: need 0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0; got RANK={ranks.rank} "
            f"WORLD_SIZE={ranks.world_size} LOCAL_RANK={ranks.local_rank}"
        )
    return ranks


def is_secondary_rank() -> bool:
    """True in a torchrun process other than rank 0 (it writes nothing into the run folder)."""
    return _env_int("RANK", 0) > 0
