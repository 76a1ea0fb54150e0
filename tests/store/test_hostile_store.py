"""The store-corruption matrix: damaged files, swapped files, edited index rows, rolled-back
indexes, old-schema stores and hostile export targets, each on a real store (sqlite + h5py).

Every damage must be reported as one line naming the episode (by ``load``, by the training
buffer, by ``rewind-store verify`` with exit status 2) and nothing committed may be lost.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from helpers.store import assert_episode_equals, make_episode, make_spec

from rewind.scripts.store import main as store_main
from rewind.store import ReplayStore, StoreError, format_store_info, store_info, verify_store
from rewind.store.episode_file import EPISODE_DIR, episode_filename
from rewind.store.orphans import ORPHAN_DIR
from rewind.store.robomimic_io import export_robomimic
from rewind.store.windows import ReplayBuffer

N = 4
BAD = 2  # the episode every corruption hits
T_BAD = len(make_episode(BAD)["actions"])


def _fill(path: Path, n: int = N, image: bool = False) -> Path:
    with ReplayStore.create(path, make_spec(image)) as store:
        for i in range(n):
            store.add_episode(**make_episode(i, image))
    return path


def _cli(*args: str) -> int:
    try:
        store_main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _error_lines(capsys: pytest.CaptureFixture) -> list[str]:
    """The command's error lines on stderr (log lines go there too)."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("rewind-store: error:")]


def _sql(path: Path, statement: str, params: tuple = ()) -> None:
    conn = sqlite3.connect(path / "index.sqlite")
    conn.execute(statement, params)
    conn.commit()
    conn.close()


def _ep(path: Path, eid: int = BAD) -> Path:
    return path / episode_filename(eid)


def _write_at(path: Path, dataset: str, step: int, value: np.ndarray) -> None:
    """Overwrite raw bytes of a contiguous dataset inside the HDF5 file (like a flipped disk block)."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        offset = ds.id.get_offset() + step * int(np.prod(ds.shape[1:])) * ds.dtype.itemsize
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(value.tobytes())


# ----------------------------------------------------------------------------- the matrix
def _flip_actions(p: Path) -> None:
    _write_at(_ep(p), "actions", 3, np.array([1e38], np.float32))


def _flip_obs(p: Path) -> None:
    _write_at(_ep(p), "obs/cube_pos", 1, np.array([7.5], np.float32))


def _nan_states(p: Path) -> None:
    _write_at(_ep(p), "states", 0, np.array([np.nan]))


def _swap(p: Path) -> None:
    tmp = p / EPISODE_DIR / "swap.tmp"
    os.rename(_ep(p, BAD), tmp)
    os.rename(_ep(p, BAD + 1), _ep(p, BAD))
    os.rename(tmp, _ep(p, BAD + 1))


def _missing(p: Path) -> None:
    _ep(p).unlink()


def _truncate(p: Path) -> None:
    data = _ep(p).read_bytes()
    _ep(p).write_bytes(data[: len(data) // 2])


def _reshape_actions(p: Path) -> None:
    with h5py.File(_ep(p), "r+") as f:
        actions = f["actions"][()]
        del f["actions"]
        f.create_dataset("actions", data=actions[:, :4])


def _edit_file_meta(p: Path) -> None:
    with h5py.File(_ep(p), "r+") as f:
        meta = json.loads(f.attrs["meta"])
        f.attrs["meta"] = json.dumps({**meta, "success": not meta["success"]})


def _edit_row_extra(p: Path) -> None:
    _sql(p, "UPDATE episodes SET extra = '{}' WHERE id = ?", (BAD,))


def _edit_row_hash(p: Path) -> None:
    _sql(p, "UPDATE episodes SET content_sha256 = ? WHERE id = ?", ("0" * 64, BAD))


def _garble_row_extra(p: Path) -> None:
    _sql(p, "UPDATE episodes SET extra = '{\"events\": [' WHERE id = ?", (BAD,))


def _unknown_row_source(p: Path) -> None:
    _sql(p, "UPDATE episodes SET source_counts = json_object('teleop', length) WHERE id = ?", (BAD,))


FILE_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "flipped action bytes (1e38)": (_flip_actions, "actions: content hash mismatch"),
    "flipped observation bytes": (_flip_obs, "obs/cube_pos: content hash mismatch"),
    "NaN written into states": (_nan_states, "states contains NaN or inf at step 0"),
    "two episode files swapped": (_swap, f"holds episode {BAD + 1}, not {BAD}"),
    "episode file deleted": (_missing, "episode file is missing"),
    "episode file truncated": (_truncate, "cannot read the episode file"),
    "mis-shaped actions": (_reshape_actions, f"actions is float32[{T_BAD}, 4], expected float32[{T_BAD}, 5]"),
    "metadata edited in the file": (_edit_file_meta, "metadata ['success'] in the file differ"),
    "metadata edited in the index row": (_edit_row_extra, "metadata ['extra'] in the file differ"),
    "hash edited in the index row": (_edit_row_hash, "content hash differs from its index row"),
}
ROW_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbled extra JSON": (_garble_row_extra, "extra is not valid JSON"),
    "unknown source name": (_unknown_row_source, "unknown source(s) ['teleop']"),
}


def _assert_one_line(exc: pytest.ExceptionInfo, *parts: str) -> None:
    text = str(exc.value)
    assert "\n" not in text
    for part in parts:
        assert part in text, (part, text)


@pytest.mark.parametrize("damage", sorted(FILE_DAMAGE))
def test_damaged_episode_file_is_reported_by_load_training_and_verify(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture
) -> None:
    path = _fill(tmp_path / "s")
    corrupt, expected = FILE_DAMAGE[damage]
    corrupt(path)
    with ReplayStore.open(path) as store:
        for eid in range(N):
            if eid not in (BAD, BAD + 1):
                assert_episode_equals(store.load(eid), make_episode(eid))
        with pytest.raises(StoreError) as exc:
            store.load(BAD)
        _assert_one_line(exc, f"episode {BAD} ({path / episode_filename(BAD)})", expected)
        with pytest.raises(StoreError) as exc:  # what rewind-train reads through
            ReplayBuffer.from_store(store)
        _assert_one_line(exc, f"episode {BAD} (", expected)
    report = verify_store(path)
    assert not report["ok"] and BAD in [p["episode"] for p in report["problems"]]
    assert _cli("verify", str(path), f"out_dir={tmp_path / 'v'}") == 2
    err = capsys.readouterr().err
    assert f"rewind-store: error: verify: {len(report['problems'])} problem(s)" in err and expected in err
    assert json.loads((tmp_path / "v" / "verify.json").read_text())["problems"] == report["problems"]


@pytest.mark.parametrize("damage", sorted(ROW_DAMAGE))
def test_damaged_index_row_is_one_line_naming_the_episode(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture
) -> None:
    path = _fill(tmp_path / "s")
    corrupt, expected = ROW_DAMAGE[damage]
    corrupt(path)
    with pytest.raises(StoreError) as exc:
        ReplayStore.open(path)
    _assert_one_line(exc, f"episode {BAD}: damaged index row", expected)
    assert _cli("info", str(path), f"out_dir={tmp_path / 'i'}") == 2
    err = _error_lines(capsys)
    assert len(err) == 1 and f"episode {BAD}" in err[0] and expected in err[0]
    report = verify_store(path)  # verify still checks every other episode
    assert [p["episode"] for p in report["problems"]] == [BAD] and report["verified"] == N - 1
    assert _cli("verify", str(path), f"out_dir={tmp_path / 'v'}") == 2


def test_clean_store_verifies_and_info_opens_every_file(tmp_path: Path) -> None:
    path = _fill(tmp_path / "s", image=True)
    assert _cli("verify", str(path), f"out_dir={tmp_path / 'v'}") == 0
    report = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert report["ok"] and report["verified"] == N and report["unverified"] == []
    info = store_info(path)
    assert info["file_problems"] == {} and info["orphans"]["files"] == 0
    _swap(path)  # info reads each file's header: a swap shows without any hashing
    info = store_info(path)
    assert sorted(info["file_problems"]) == [str(BAD), str(BAD + 1)]
    assert "PROBLEMS    2 episode file(s)" in format_store_info(info)


# ----------------------------------------------------------------------------- rolled-back index (item 7)
def _backup_index(path: Path, dest: Path) -> None:
    src, dst = sqlite3.connect(path / "index.sqlite"), sqlite3.connect(dest)
    src.backup(dst)
    src.close()
    dst.close()


def _restore_index(path: Path, backup: Path) -> None:
    for suffix in ("-wal", "-shm"):
        (path / f"index.sqlite{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, path / "index.sqlite")


def test_rolled_back_index_moves_committed_files_aside_and_never_reuses_their_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _fill(tmp_path / "s", n=3)
    _backup_index(path, tmp_path / "backup.sqlite")
    with ReplayStore.open(path, mode="a") as store:
        for i in (3, 4):
            store.add_episode(**make_episode(i))
    lost = {eid: _ep(path, eid).read_bytes() for eid in (3, 4)}
    _restore_index(path, tmp_path / "backup.sqlite")  # rows 3 and 4 are gone, their files are not
    with caplog.at_level(logging.WARNING), ReplayStore.open(path, mode="a") as store:
        assert len(store) == 3
        info = store.add_episode(**make_episode(5))
        assert info.id == 5  # not 3: that id's file still exists, moved aside
        assert store.orphan_report is not None and store.orphan_report.moved == [
            Path(episode_filename(3)).name,
            Path(episode_filename(4)).name,
        ]
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("moved 2 episode file(s) without an index row" in w and ORPHAN_DIR in w for w in warning)
    for eid, data in lost.items():
        [moved] = (path / ORPHAN_DIR).glob(f"*/{Path(episode_filename(eid)).name}")
        assert moved.read_bytes() == data  # byte for byte what was committed
    info = store_info(path)
    assert info["orphans"]["files"] == 2 and "orphans     2 episode file(s)" in format_store_info(info)
    # the same name orphaned again (another rollback, same second) goes to a new folder: no overwrite
    _restore_index(path, tmp_path / "backup.sqlite")
    ReplayStore.open(path, mode="a").close()
    ReplayStore.open(path, mode="a").close()
    names = sorted(p.name for p in (path / ORPHAN_DIR).glob("*/*.h5"))
    assert names == sorted([Path(episode_filename(i)).name for i in (3, 4, 5)])
    _restore_index(path, tmp_path / "backup.sqlite")
    shutil.copy(next((path / ORPHAN_DIR).glob("*/ep_000000005.h5")), _ep(path, 5))
    with ReplayStore.open(path, mode="a") as store:
        assert store.add_episode(**make_episode(6)).id == 6
    assert len(list((path / ORPHAN_DIR).glob("*/ep_000000005.h5"))) == 2


def test_commit_never_overwrites_an_existing_episode_file(tmp_path: Path) -> None:
    path = _fill(tmp_path / "s", n=1)
    with ReplayStore.open(path, mode="a") as store:
        foreign = _ep(path, 1)
        foreign.write_bytes(b"someone else's file")
        with pytest.raises(StoreError, match="already exists; refusing to overwrite"):
            store.add_episode(**make_episode(1))
        assert foreign.read_bytes() == b"someone else's file" and len(store) == 1


# ----------------------------------------------------------------------------- schema 1 stores (item 8)
def _downgrade_to_v1(path: Path) -> None:
    """Turn a store into exactly what schema-1 code wrote: no hash column, no hash attributes."""
    _sql(path, "ALTER TABLE episodes DROP COLUMN content_sha256")
    _sql(path, "UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    for file in (path / EPISODE_DIR).glob("ep_*.h5"):
        with h5py.File(file, "r+") as f:
            f.attrs["schema_version"] = 1
            del f.attrs["content_sha256"]
            f.visititems(lambda _, obj: obj.attrs.__delitem__("sha256") if "sha256" in obj.attrs else None)


def test_schema_1_store_opens_migrates_and_reports_old_episodes_unverified(tmp_path: Path) -> None:
    path = _fill(tmp_path / "s", n=2, image=True)
    _downgrade_to_v1(path)
    with ReplayStore.open(path) as reader:  # read-only: no migration, no hashes, still readable
        assert_episode_equals(reader.load(1), make_episode(1, image=True))
    report = verify_store(path)
    assert report["ok"] and report["unverified"] == [0, 1] and report["verified"] == 0
    assert store_info(path)["unverified"] == [0, 1]
    with ReplayStore.open(path, mode="a") as store:  # a writer migrates in place
        store.add_episode(**make_episode(2, image=True))
    conn = sqlite3.connect(path / "index.sqlite")
    assert conn.execute("SELECT value FROM store_meta WHERE key='schema_version'").fetchone() == ("2",)
    assert [r[0] is None for r in conn.execute("SELECT content_sha256 FROM episodes ORDER BY id")] == [
        True,
        True,
        False,
    ]
    conn.close()
    report = verify_store(path)
    assert report["ok"] and report["unverified"] == [0, 1] and report["verified"] == 1
    # old episodes have no hash: flipped bytes there stay unnoticed (the documented limit) ...
    _write_at(_ep(path, 0), "actions", 3, np.array([1e38], np.float32))
    assert verify_store(path)["ok"]
    # ... but a swap is still caught by the episode id each file carries
    os.rename(_ep(path, 0), path / EPISODE_DIR / "x")
    os.rename(_ep(path, 1), _ep(path, 0))
    os.rename(path / EPISODE_DIR / "x", _ep(path, 1))
    assert {p["episode"] for p in verify_store(path)["problems"]} == {0, 1}


# ----------------------------------------------------------------------------- export (item 9)
def test_export_refuses_an_existing_target_and_a_path_inside_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _fill(tmp_path / "s")
    other = _fill(tmp_path / "other", n=1)
    index_bytes = (other / "index.sqlite").read_bytes()
    target = tmp_path / "x.hdf5"
    target.write_bytes(b"precious")
    with ReplayStore.open(path) as store:
        with pytest.raises(StoreError, match="already exists; pass overwrite=true"):
            export_robomimic(store, target)
        assert target.read_bytes() == b"precious"
        with pytest.raises(StoreError, match="is inside the replay store"):
            export_robomimic(store, other / "index.sqlite", overwrite=True)
        assert (other / "index.sqlite").read_bytes() == index_bytes
        export_robomimic(store, target, overwrite=True)
    with h5py.File(target, "r") as f:
        assert len(f["data"]) == N
    assert _cli("export", str(path), f"out={target}", f"out_dir={tmp_path / 'e'}") == 2
    err = _error_lines(capsys)
    assert err == [f"rewind-store: error: out: {target} already exists; pass overwrite=true to replace it"]
    assert _cli("export", str(path), f"out={target}", "overwrite=true", f"out_dir={tmp_path / 'e2'}") == 0


@pytest.mark.parametrize("damage", ["mis-shaped actions", "flipped action bytes (1e38)"])
def test_export_validates_every_episode_before_the_target_appears(tmp_path: Path, damage: str) -> None:
    path = _fill(tmp_path / "s")
    corrupt, expected = FILE_DAMAGE[damage]
    corrupt(path)
    target = tmp_path / "x.hdf5"
    with ReplayStore.open(path) as store, pytest.raises(StoreError) as exc:
        export_robomimic(store, target)
    _assert_one_line(exc, f"episode {BAD} (", expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no target, no temp file


_EXPORTER = """
import sys
from rewind.store import ReplayStore
from rewind.store.robomimic_io import export_robomimic
with ReplayStore.open(sys.argv[1]) as store:
    export_robomimic(store, sys.argv[2])
"""


def test_killed_export_never_leaves_a_file_under_the_target_name(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with ReplayStore.create(path, make_spec(image=True)) as store:
        for i in range(40):
            store.add_episode(**make_episode(i, image=True, length=200))
    target = tmp_path / "out" / "x.hdf5"
    target.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _EXPORTER, str(path), str(target)])
    deadline = time.monotonic() + 60
    while not list(target.parent.glob(".x.hdf5.tmp-*")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the export never started writing"
        time.sleep(0.001)
    assert proc.poll() is None, "the export finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not target.exists()
    assert [p.name.startswith(".x.hdf5.tmp-") for p in target.parent.iterdir()] == [True]


def test_verify_reports_store_level_damage(tmp_path: Path, capsys: Any) -> None:
    assert _cli("verify", str(tmp_path / "nope"), f"out_dir={tmp_path / 'v'}") == 2
    assert "nope" in capsys.readouterr().err
    path = _fill(tmp_path / "s", n=2)
    _ep(path, 0).with_name("ep_000000007.h5").write_bytes(_ep(path, 0).read_bytes())
    report = verify_store(path)  # a file without a row is listed, not a failure (a writer moves it)
    assert report["ok"] and report["uncommitted_files"] == ["ep_000000007.h5"]
