"""A round's control arm in its own process, beside the round's collection and fine-tuning.

The control arm (the same fine-tuning on the demos alone, its promotion gate and its evaluation) needs
nothing the round produces, so with ``parallel_control=true`` (the default) it runs in a second process
while this one collects, fine-tunes, judges, calibrates and evaluates the round's policy: the loop runs
one thread per process, so on the 2-core machine the arm's two minutes per round of the default loop
mostly leave the wall time. The process computes exactly
what the in-process arm computes (same seeds, same thread count), so the records are identical
(``tests/loop/test_control_arm.py``); ``parallel_control=false`` runs it in-process after the fine-tuning.

The child writes ``round_NN/control/control_result.json`` (atomically) and its log to
``round_NN/control/run.log``; it dies with its parent (Linux), so a killed loop leaves no orphan
writing into a round that the resumed loop clears.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import signal
import traceback
from pathlib import Path
from typing import Any

from rewind.loop import stages
from rewind.loop.config import LoopConfig
from rewind.loop.finetune_data import finetune_config
from rewind.loop.lineage import policy_record, round_dir
from rewind.loop.promotion import deployed_selection, judge_round
from rewind.loop.record import ControlRecord, RoundRecord
from rewind.loop.report import success_text
from rewind.loop.sources import is_external
from rewind.loop.stages import StageHook, timed
from rewind.rollout.workers_io import main_hidden, start_context
from rewind.train.policy_api import resolve_weights
from rewind.utils.io import atomic_write_json

log = logging.getLogger(__name__)

#: The child's result (``{"control": ..., "timings_s": ...}`` or ``{"error": ...}``), in the arm's folder.
RESULT = "control_result.json"
#: Seconds the child gets to exit after a terminate before it is killed.
STOP_TIMEOUT_S = 5.0
_PR_SET_PDEATHSIG = 1


def run_control_arm(
    cfg: LoopConfig,
    out: Path,
    r: int,
    records: list[RoundRecord],
    t: dict[str, float],
    hook: StageHook | None,
) -> ControlRecord:
    """The control arm of round ``r`` in this process: the same fine-tuning on the demos alone, through
    its own promotion gate, evaluated; its stage timings go into ``t``."""
    folder = round_dir(out, r) / "control"
    tcfg, _, _ = finetune_config(cfg, out, r, records, folder / "train", control=True)
    with timed(t, "control_finetune", hook, r):
        stages.train(tcfg)
    weights = resolve_weights(str(folder / "train"))
    prev = records[-1].control or records[-1]
    candidate = policy_record(out, weights, prev.policy.version)
    gate = judge_round(cfg, out, r, candidate, weights, prev, folder, "control", t, hook, base=records[0])
    if gate is not None and not gate.promoted:
        return ControlRecord(prev.policy, prev.eval, prev.selection, gate)
    with timed(t, "control_eval", hook, r):
        ev = stages.evaluate(cfg, weights, folder / "eval")
    log.info("round %d control (demos only): success %s", r, success_text(ev))
    return ControlRecord(candidate, ev, gate.candidate_selection if gate else None, gate)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when its parent dies; exit now if the parent is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: a killed parent may leave this arm running
        pass
    if os.getppid() != parent:
        os._exit(1)


def _child(cfg: LoopConfig, out: str, r: int, records: list[RoundRecord], parent: int) -> None:
    """The control arm of round ``r`` (runs in the child process)."""
    _die_with_parent(parent)
    import torch

    from rewind.utils.logging import setup_logging

    folder = round_dir(Path(out), r) / "control"
    setup_logging(log_file=folder / "run.log")
    for handler in logging.getLogger().handlers:  # the console is the parent's: warnings only from here
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    timings: dict[str, float] = {}
    try:
        rec = run_control_arm(dataclasses.replace(cfg, progress=False), Path(out), r, records, timings, None)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        log.error("round %d control arm failed:\n%s", r, traceback.format_exc())
        atomic_write_json(folder / RESULT, {"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from exc
    atomic_write_json(folder / RESULT, {"control": rec.to_json(), "timings_s": timings})


class ControlProcess:
    """Round ``r``'s control arm running in a child process: :meth:`result` waits for it."""

    def __init__(self, cfg: LoopConfig, out: Path, r: int, records: list[RoundRecord]) -> None:
        self.r, self.folder = r, round_dir(out, r) / "control"
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / RESULT).unlink(missing_ok=True)
        ctx = start_context("spawn")
        self.proc = ctx.Process(
            target=_child, args=(cfg, str(out), r, records, os.getpid()), name=f"control-round-{r}"
        )
        with main_hidden():
            self.proc.start()
        log.info(
            "round %d control arm: running in process %d (log: %s)", r, self.proc.pid, self.folder / "run.log"
        )

    def result(self, timings: dict[str, float]) -> ControlRecord:
        """Wait for the arm; its record, with its stage timings added to ``timings``. Raises
        ``RuntimeError`` naming the round, the cause and the arm's log when the process failed."""
        self.proc.join()
        path = self.folder / RESULT
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        if self.proc.exitcode != 0 or "control" not in data:
            cause = data.get("error") or f"exit code {self.proc.exitcode}"
            raise RuntimeError(
                f"round {self.r}: the control arm's process failed ({cause}); its log: "
                f"{self.folder / 'run.log'} (parallel_control=false runs it in this process)"
            )
        timings.update(data["timings_s"])
        return ControlRecord.from_json(data["control"], str(path))

    def stop(self) -> None:
        """Terminate the arm if it still runs (the round was interrupted), then kill it if it must."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(STOP_TIMEOUT_S)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()


def control_process(cfg: LoopConfig, out: Path, r: int, records: list[RoundRecord]) -> ControlProcess | None:
    """Round ``r``'s control arm started in its own process (``parallel_control``), or None: the caller
    runs it in-process (or there is none). A human round, which may stop to wait for a person, runs it
    in-process after the collection."""
    if not (cfg.control and cfg.parallel_control) or is_external(cfg.recovery):
        return None
    if cfg.promotion.gated:  # a deployed policy without a selection result is measured once, here
        deployed_selection(cfg, out, records[-1].control or records[-1], round_dir(out, r))
    return ControlProcess(cfg, out, r, records)
