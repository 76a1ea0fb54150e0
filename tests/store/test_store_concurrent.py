"""Training while collecting: a reader process sees episodes a concurrent writer commits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers.store import LOW_DIM, assert_episode_equals, make_episode

from rewind.store import ReplayStore
from rewind.store.windows import ReplayBuffer, WindowSampler

TESTS = Path(__file__).resolve().parents[1]  # the writer runs as ``python -m helpers.writer`` from here
N_EPISODES = 12


def test_reader_refresh_sees_commits_of_concurrent_writer(tmp_path: Path) -> None:
    path = tmp_path / "store"
    cmd = [sys.executable, "-m", "helpers.writer", str(path), str(N_EPISODES), "0.01"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS)
    try:
        assert proc.stdout.readline() == "ready\n"
        reader = ReplayStore.open(path, mode="r")
        seen: set[int] = set()
        for line in proc.stdout:
            committed = int(line.split()[1])
            new = reader.refresh()
            seen.update(info.id for info in new)
            # the writer's commit returned, so the reader must see it now; all visible episodes are whole
            assert committed in seen
            for info in new:
                assert_episode_equals(reader.load(info.id), make_episode(info.id, image=True))
            if committed % 4 == 3:  # train on what is there so far
                buffer = ReplayBuffer.from_store(reader, obs_keys=list(LOW_DIM))
                batch = WindowSampler(buffer, n_obs_steps=2, horizon=8, seed=committed).sample(32)
                assert set(np.unique(batch["episode_id"])) <= seen
                assert batch["action"].shape == (32, 8, 5)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        assert sorted(seen) == list(range(N_EPISODES))
        assert reader.refresh() == []
        reader.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
