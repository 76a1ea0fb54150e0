"""Statistics of evaluation results: the Wilson interval of the success rate and stage histograms.

``wilson_interval`` lives in :mod:`rewind.utils.stats` (shared with the env benchmarks) and is
re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewind.utils.stats import wilson_interval

__all__ = ["stage_histogram", "wilson_interval"]


def stage_histogram(max_stages: Sequence[int], stage_names: Sequence[str]) -> dict[str, int]:
    """Count episodes by the furthest stage they reached, in task order.

    ``max_stages[i]`` is an index into ``stage_names`` (the stage in progress) or
    ``len(stage_names)`` for a completed task, which is counted as ``done``.
    """
    names = [*stage_names, "done"]
    counts = dict.fromkeys(names, 0)
    for s in max_stages:
        counts[names[min(max(int(s), 0), len(stage_names))]] += 1
    return counts
