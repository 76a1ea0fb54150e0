"""``rewind-store``: inspect a replay store, or convert between a store and a robomimic HDF5 file.

* ``rewind-store info PATH``: summary of the store (episodes, steps, sources, success rate);
* ``rewind-store export PATH out=FILE.hdf5``: write the store as a robomimic dataset;
* ``rewind-store import FILE.hdf5 out=STORE_PATH``: build a store from a robomimic dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from rewind.cli.app import hydra_command
from rewind.config import CommandConfig, require

STORE_COMMANDS = ("info", "export", "import")


@dataclass
class StoreCommandConfig(CommandConfig):
    """Schema of ``rewind-store`` (``configs/store.yaml``).

    Attributes:
        cmd: one of ``info``, ``export``, ``import``.
        path: the replay store (info, export) or the robomimic HDF5 file (import).
        out: destination file (export) or store (import); unused by info.
    """

    cmd: str = MISSING
    path: str = MISSING
    out: str | None = None

    def __post_init__(self) -> None:
        valid = ", ".join(STORE_COMMANDS)
        require(self.cmd in STORE_COMMANDS, f"cmd must be one of {valid}; got '{self.cmd}'")
        if self.cmd in ("export", "import"):
            require(bool(self.out), f"{self.cmd} needs out=PATH (where to write)")


@hydra_command(config_name="store", positional=("cmd", "path"))
def main(cfg: StoreCommandConfig) -> dict[str, Any]:
    """Inspect a replay store (info), or export it to / import it from robomimic HDF5."""
    if cfg.cmd == "info":
        from rewind.store import store_info

        return dict(store_info(cfg.path))
    from rewind.store import ReplayStore, robomimic_io

    summary: dict[str, Any] = {"cmd": cfg.cmd, "src": cfg.path, "dest": cfg.out}
    if cfg.cmd == "export":
        with ReplayStore.open(cfg.path) as store:
            summary["demos"] = len(robomimic_io.export_robomimic(store, cfg.out))
    else:
        with robomimic_io.import_robomimic(cfg.path, cfg.out) as store:
            summary.update(store.summary())
    return summary


if __name__ == "__main__":
    main()
