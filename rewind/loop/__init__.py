"""The rewind-and-recover training loop (``rewind-loop``): collect recovery data where the policy fails,
fine-tune on it, recalibrate, evaluate, repeat.

* :mod:`rewind.loop.sources`: the recovery sources (``recovery=retry|operator|dagger|human|guided``);
* :mod:`rewind.loop.operator_drive`: a scripted operator driving a monitored episode (recorded steps);
* :mod:`rewind.loop.episodes`: a round's monitored episodes, recorded with their labels;
* :mod:`rewind.loop.guided`: ReGuide-style guidance (phase prototypes, latent dynamics, drift gate);
* :mod:`rewind.loop.guided_diagnostics`: what guidance did (gating, action change, drift AUROC);
* :mod:`rewind.loop.guided_sweep`: one guided collection per setting (``bench/guided_sweep.py``);
* :mod:`rewind.loop.stages`: demos, training, calibration and evaluation steps;
* :mod:`rewind.loop.finetune_data`: what a round fine-tunes on (stores, sample weights, config);
* :mod:`rewind.loop.lineage`: the folder protocol (resume at round granularity);
* :mod:`rewind.loop.stall`: the stall threshold sized from the demos' stage durations;
* :mod:`rewind.loop.runner`: :func:`run_loop`; :mod:`rewind.loop.report`: report, W&B, summary.

See ``docs/loop.md``.
"""

from rewind.loop.config import LoopConfig
from rewind.loop.runner import run_loop

__all__ = ["LoopConfig", "run_loop"]
