"""Crash safety: SIGKILL the writer at random moments; every committed episode must survive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from helpers.store import assert_episode_equals, make_episode, make_spec

from rewind.store import ReplayStore
from rewind.store.episode_file import EPISODE_DIR, episode_filename
from rewind.store.orphans import ORPHAN_DIR

TESTS = Path(__file__).resolve().parents[1]  # the writer runs as ``python -m helpers.writer`` from here
N_TRIALS = 50


def _start_writer(path: Path, max_episodes: int, sleep_s: float = 0.0) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "helpers.writer", str(path), str(max_episodes), str(sleep_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS)
    line = proc.stdout.readline()
    assert line == "ready\n", f"writer did not start: {line!r} {proc.stderr.read() if not line else ''}"
    return proc


def _verify(path: Path, n_checked: int) -> int:
    """Open for appending (moves orphans aside), check ids increase, new episodes' contents, no
    stray files in episodes/ and no id of a moved-aside file reused."""
    with ReplayStore.open(path, mode="a") as store:
        infos = store.episodes()
        ids = [e.id for e in infos]
        assert ids == sorted(set(ids))
        for i, info in enumerate(infos[n_checked:], start=n_checked):
            assert info.extra["index"] == i
            assert_episode_equals(store.load(info.id), make_episode(i, image=True))
        files = sorted(p.name for p in (path / EPISODE_DIR).iterdir())
        assert files == sorted(Path(episode_filename(e.id)).name for e in infos)
        moved = {p.name for p in (path / ORPHAN_DIR).glob("*/*.h5")}
        assert not moved & set(files)
        return len(infos)


def test_sigkill_at_random_moments_loses_at_most_the_open_episode(tmp_path: Path) -> None:
    path = tmp_path / "store"
    ReplayStore.create(path, make_spec(image=True)).close()
    rng = np.random.default_rng(20240601)
    n_committed = 0
    for _trial in range(N_TRIALS):
        proc = _start_writer(path, max_episodes=10_000)
        time.sleep(rng.uniform(0.0, 0.150))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        reported = [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]
        n_now = _verify(path, n_committed)
        # every commit the writer reported is there, and at most one more (killed after the row insert)
        assert n_now >= n_committed
        if reported:
            assert reported == list(range(n_committed, reported[-1] + 1))
            assert reported[-1] + 1 <= n_now <= reported[-1] + 2
        n_committed = n_now
    # the kills happened while episodes were being written, not only before the first one
    assert n_committed > N_TRIALS // 2
    with ReplayStore.open(path, mode="r") as store:
        for i, info in enumerate(store.episodes()):
            assert_episode_equals(store.load(info.id), make_episode(i, image=True))


def test_uncommitted_files_are_invisible_and_moved_aside_by_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with ReplayStore.create(path, make_spec()) as store:
        store.add_episode(**make_episode(0))
    # simulate a writer killed after rename (file, no row) and one killed mid-write (temp file)
    orphan = path / episode_filename(1)
    orphan.write_bytes((path / episode_filename(0)).read_bytes())
    content = orphan.read_bytes()
    tmp_file = path / EPISODE_DIR / ".tmp-999-abc.h5"
    tmp_file.write_bytes(b"partial")
    with ReplayStore.open(path, mode="r") as reader:
        assert [e.id for e in reader.episodes()] == [0]
        assert orphan.exists()  # readers never touch files
    with ReplayStore.open(path, mode="a") as writer:
        assert not orphan.exists() and not tmp_file.exists()
        [moved] = (path / ORPHAN_DIR).glob("*/ep_000000001.h5")
        assert moved.read_bytes() == content
        info = writer.add_episode(**make_episode(1))
        assert info.id == 2  # the moved file's id is not reused
        assert_episode_equals(writer.load(2), make_episode(1))
