"""A full disk while an episode is committed (simulated: the episode file's writer raises ENOSPC half
way through, and in another test the index refuses the row): one line naming the store and the
episode, no file of it left behind, and the episodes committed before stay readable."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.store import assert_episode_equals, make_episode, make_spec

from rewind.cli.app import is_user_error
from rewind.store import ReplayStore, StoreError
from rewind.store import episode_file as episode_file_module
from rewind.store import index as index_module
from rewind.store.episode_file import EPISODE_DIR
from rewind.store.verify import verify_store

REAL_FILL = episode_file_module._fill


def _full_disk_after_some_data(*args: Any, **kwargs: Any) -> None:
    REAL_FILL(*args, **kwargs)  # the temp file holds the episode's data: then the disk is full
    raise OSError(errno.ENOSPC, "No space left on device")


def _refused_row(*args: Any, **kwargs: Any) -> None:
    raise sqlite3.OperationalError("database or disk is full")


@pytest.mark.parametrize(
    ("target", "name", "fake", "reason"),
    [
        (episode_file_module, "_fill", _full_disk_after_some_data, "No space left on device"),
        (index_module, "insert_row", _refused_row, "database or disk is full"),
    ],
    ids=["episode-file", "index-row"],
)
def test_a_full_disk_is_one_line_and_keeps_the_committed_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: Any, name: str, fake: Any, reason: str
) -> None:
    path = tmp_path / "store"
    with ReplayStore.create(path, make_spec()) as store:
        for i in range(3):
            store.add_episode(**make_episode(i))
        monkeypatch.setattr(target, name, fake)
        with pytest.raises(StoreError) as info:
            with store.episode(seed=77, policy_version="v", round=1) as writer:
                ep = make_episode(3, length=5)
                for t in range(5):
                    obs = {k: v[t] for k, v in ep["obs"].items()}
                    writer.add(obs, ep["actions"][t], ep["states"][t], "policy")
        monkeypatch.undo()
        message = str(info.value)
        assert "\n" not in message and is_user_error(info.value)
        assert message == (
            f"store {path}: episode 3 (seed 77) was not committed ({reason}); "
            "the 3 episode(s) committed before are intact"
        )
        assert len(store) == 3
        store.add_episode(**make_episode(3))  # the disk has room again: the store takes the next one
        assert [e.id for e in store.episodes()] == [0, 1, 2, 3]
    assert sorted(p.name for p in (path / EPISODE_DIR).iterdir()) == [f"ep_{i:09d}.h5" for i in range(4)]
    with ReplayStore.open(path) as store:
        for i, info in enumerate(store.episodes()):
            assert_episode_equals(store.load(info.id), make_episode(i))
    report = verify_store(path)
    assert report["ok"] and report["episodes"] == 4 and not report["uncommitted_files"]
