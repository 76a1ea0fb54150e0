"""Training-state files: tensors <-> JSON skeleton round trips, atomic folders and pointers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rewind.train.state import (
    TrainingState,
    atomic_dir,
    clean_temporaries,
    join_tensors,
    load_state_dict,
    load_training_state,
    read_pointer,
    save_state_dict,
    save_training_state,
    split_tensors,
    write_pointer,
)


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b and type(a) is type(b)


def test_optimizer_state_round_trips_exactly(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    for _ in range(3):
        model(torch.randn(4, 3, generator=gen)).square().mean().backward()
        opt.step()
    skeleton = save_state_dict(tmp_path, "optimizer", opt.state_dict())
    restored = load_state_dict(tmp_path, "optimizer", skeleton)
    assert _equal(opt.state_dict(), restored)  # int keys, tuples (betas), 0-d step tensors survive
    assert not list(tmp_path.glob("*.pkl")) and not list(tmp_path.glob("*.pt"))


def test_split_join_tags_non_string_keys_and_tuples() -> None:
    state = {"a": (1, 2.5), "b": {0: torch.arange(3), 1: [torch.ones(2), None]}, "c": "x"}
    tensors: dict[str, torch.Tensor] = {}
    skeleton = split_tensors(state, tensors)
    assert set(tensors) == {"b.0", "b.1.0"}
    assert _equal(join_tensors(skeleton, tensors), state)
    with pytest.raises(TypeError, match="without pickle"):
        split_tensors({"f": object()}, {})


def test_atomic_dir_keeps_the_previous_save_when_interrupted(tmp_path: Path) -> None:
    final = tmp_path / "weights" / "step_000010"
    with atomic_dir(final) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_dir(final) as tmp:
        (tmp / "a.txt").write_text("half")
        raise KeyboardInterrupt
    assert (final / "a.txt").read_text() == "old"
    assert [p.name for p in final.parent.iterdir()] == ["step_000010"]


def test_pointer_and_leftover_temporaries(tmp_path: Path) -> None:
    root = tmp_path / "training_state"
    assert read_pointer(root) is None
    (root / "step_000010").mkdir(parents=True)
    write_pointer(root, 10)
    assert read_pointer(root) == 10
    leftover = root / ".tmp-step_000020-123"  # what a kill in the middle of a save leaves behind
    leftover.mkdir()
    clean_temporaries(tmp_path)
    assert not leftover.exists() and read_pointer(root) == 10


def test_training_state_restores_components_generators_and_numpy_state(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    gen = torch.Generator().manual_seed(3)
    box = {"np": {"bit_generator": "PCG64", "state": {"state": 2**100 + 7, "inc": 5}}}
    state = TrainingState({"model": model}, {"train": gen}, lambda: box["np"], lambda s: box.update(np=s))
    save_training_state(tmp_path, 5, state, {"note": "x"})
    save_training_state(tmp_path, 7, state, {"note": "y"})
    expected = torch.randn(3, generator=gen)
    with torch.no_grad():
        model.weight.zero_()
    box["np"] = None
    payload = load_training_state(tmp_path, state)
    assert payload is not None and payload["step"] == 7 and payload["note"] == "y"
    assert torch.equal(torch.randn(3, generator=gen), expected)
    assert model.weight.abs().sum() > 0
    assert box["np"]["state"]["state"] == 2**100 + 7  # 128-bit PCG64 state survives JSON
    assert [p.name for p in (tmp_path / "training_state").glob("step_*")] == ["step_000007"]
