"""``rewind-store``: inspect or verify a replay store, or convert between a store and robomimic HDF5.

* ``rewind-store info PATH``: summary of the store (episodes, steps, sources, success rate, file
  problems, orphaned files);
* ``rewind-store verify PATH``: check every episode (content hash, id, shapes); exit status 2 and
  the list of problems (also in ``out_dir/verify.json``) if any;
* ``rewind-store export PATH out=FILE.hdf5 [overwrite=true]``: write the store as a robomimic dataset;
* ``rewind-store import FILE.hdf5 out=STORE_PATH``: build a store from a robomimic dataset.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from rewind.cli.app import hydra_command
from rewind.config import CommandConfig, require

STORE_COMMANDS = ("info", "export", "import", "verify")

logger = logging.getLogger(__name__)


@dataclass
class StoreCommandConfig(CommandConfig):
    """Schema of ``rewind-store`` (``configs/store.yaml``).

    Attributes:
        cmd: one of ``info``, ``export``, ``import``, ``verify``.
        path: the replay store (info, verify, export) or the robomimic HDF5 file (import).
        out: destination file (export) or store (import); unused by info and verify.
        overwrite: export only: replace an existing ``out`` file (refused by default).
    """

    cmd: str = MISSING
    path: str = MISSING
    out: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        valid = ", ".join(STORE_COMMANDS)
        require(self.cmd in STORE_COMMANDS, f"cmd must be one of {valid}; got '{self.cmd}'")
        if self.cmd in ("export", "import"):
            require(bool(self.out), f"{self.cmd} needs out=PATH (where to write)")


@hydra_command(config_name="store", positional=("cmd", "path"))
def main(cfg: StoreCommandConfig) -> dict[str, Any]:
    """Inspect or verify a replay store, or export it to / import it from robomimic HDF5."""
    if cfg.cmd == "info":
        from rewind.store import format_store_info, store_info

        info = store_info(cfg.path)
        logger.info("\n%s", format_store_info(info))
        return dict(info)
    if cfg.cmd == "verify":
        return _verify(cfg)
    from rewind.store import ReplayStore, robomimic_io

    summary: dict[str, Any] = {"cmd": cfg.cmd, "src": cfg.path, "dest": cfg.out}
    if cfg.cmd == "export":
        with ReplayStore.open(cfg.path) as store:
            names = robomimic_io.export_robomimic(store, cfg.out, overwrite=cfg.overwrite)
            summary["demos"] = len(names)
    else:
        with robomimic_io.import_robomimic(cfg.path, cfg.out) as store:
            summary.update(store.summary())
    return summary


def _verify(cfg: StoreCommandConfig) -> dict[str, Any]:
    from rewind.store import StoreError
    from rewind.store.verify import verify_failure_message, verify_store
    from rewind.utils.io import atomic_write_json

    report = verify_store(cfg.path)
    atomic_write_json(Path(cfg.out_dir) / "verify.json", report)
    if not report["ok"]:
        raise StoreError(verify_failure_message(report))
    return report


if __name__ == "__main__":
    main()
