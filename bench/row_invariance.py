"""Is a row's chunk independent of its place in a fixed-size inference block? At 1 and 2 torch threads.

Batched rollouts are bit-identical to sequential ones only if, inside a block of ``--rows`` rows, a
row's result does not depend on the other rows or on where it sits (docs/rollouts.md, "What the same
results means"). This moves rows of a reference block to other places, among other rows, and records
the largest change per torch-thread count, for a diffusion policy (DDIM) at two U-Net sizes (random
weights: only the arithmetic matters).

    .venv/bin/python bench/row_invariance.py --out bench/results/row_invariance.json
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _commands import write_result

from rewind.policies.noise import NoiseStream, RowGenerators
from rewind.policies.registry import make_policy
from rewind.utils.seeding import torch_generator

log = logging.getLogger("bench")
D_OBS, D_ACT = 7, 3
MOVES = [(0, 3), (4, 0), (9, 5), (7, 7)]  # (place in the mixed block, row of the reference block)


def _policy(down_dims: list[int]) -> Any:
    meta = {"obs": {"state": {"shape": [D_OBS], "type": "low_dim"}}, "action_dim": D_ACT}
    cfg = {
        "n_obs_steps": 2,
        "horizon": 16,
        "n_action_steps": 8,
        "down_dims": down_dims,
        "obs_feature_dim": 64,
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = make_policy("diffusion", cfg, meta)
    rng = np.random.default_rng(0)
    policy.fit_normalizer(
        {"obs/state": rng.normal(size=(100, D_OBS)), "action": rng.normal(size=(100, D_ACT))}
    )
    return policy.eval()


def _chunks(policy: Any, obs: torch.Tensor, seeds: list[int]) -> torch.Tensor:
    streams = RowGenerators([NoiseStream(torch_generator(s)) for s in seeds])
    return policy.predict_chunk({"state": obs}, 1, streams)


def measure(down_dims: list[int], threads: int, rows: int) -> dict[str, Any]:
    """The largest change of a moved row, per move, at ``threads`` torch threads."""
    torch.set_num_threads(threads)
    policy = _policy(down_dims)
    gen = torch.Generator().manual_seed(1)
    ref_obs, other = torch.randn(rows, 2, D_OBS, generator=gen), torch.randn(rows, 2, D_OBS, generator=gen)
    ref = _chunks(policy, ref_obs, list(range(rows)))
    moves = []
    for place, src in MOVES:
        obs, seeds = other.clone(), [100 + i for i in range(rows)]
        obs[place], seeds[place] = ref_obs[src], src
        diff = (_chunks(policy, obs, seeds)[place] - ref[src]).abs().max().item()
        moves.append({"place": place, "row": src, "max_abs_change": diff})
    return {
        "down_dims": down_dims,
        "threads": threads,
        "rows": rows,
        "moves": moves,
        "bit_identical": all(m["max_abs_change"] == 0.0 for m in moves),
    }


def main() -> None:
    """Measure at 1 and 2 threads for both U-Net sizes; log and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("bench/results/row_invariance.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = [measure(d, t, args.rows) for t in (1, 2) for d in ([16, 32], [32, 64, 128])]
    for r in out:
        worst = max(m["max_abs_change"] for m in r["moves"])
        log.info(
            "threads %d, U-Net %s: bit-identical %s (largest change %.2e)",
            r["threads"],
            r["down_dims"],
            r["bit_identical"],
            worst,
        )
    write_result(args.out, {"results": out})


if __name__ == "__main__":
    main()
