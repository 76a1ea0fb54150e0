"""Training windows: index semantics vs a naive reference, padding, weights, seeding, torch adapter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.store import LOW_DIM, make_episode, make_spec

from rewind.store import SOURCE_CODES, ReplayStore, StoreError
from rewind.store.windows import ReplayBuffer, WindowSampler

LENGTHS = [1, 5, 17, 30]


def _buffer() -> ReplayBuffer:
    n = sum(LENGTHS)
    rng = np.random.default_rng(0)
    data = {
        "obs/pos": np.arange(n, dtype=np.float32)[:, None].repeat(3, axis=1),
        "obs/img": rng.integers(0, 255, (n, 4, 4, 3), dtype=np.uint8),
        "action": rng.standard_normal((n, 5)).astype(np.float32),
        "source": rng.integers(0, 4, n).astype(np.uint8),
        "reward": np.zeros(n, np.float32),
    }
    return ReplayBuffer(data, np.cumsum(LENGTHS), episode_ids=[10, 11, 12, 13])


def _reference(buf: ReplayBuffer, to: int, h: int, pad_before: int, pad_after: int) -> list[dict]:
    """One Python dict per window, straight from the definition in the module docstring."""
    out, begin = [], 0
    for eid, end in zip(buf.episode_ids, buf.episode_ends, strict=True):
        length = end - begin
        for s in range(-pad_before, length - h + pad_after + 1):
            clamp = [min(max(s + k, 0), length - 1) + begin for k in range(h)]
            out.append(
                {
                    "pos": buf.data["obs/pos"][clamp[:to]],
                    "img": buf.data["obs/img"][clamp[:to]],
                    "action": buf.data["action"][clamp],
                    "source": buf.data["source"][clamp],
                    "mask": np.array([0 <= s + k < length for k in range(h)]),
                    "episode_id": eid,
                    "t": min(max(s + to - 1, 0), length - 1),
                }
            )
        begin = end
    return out


@pytest.mark.parametrize(
    ("to", "h", "pad_before", "pad_after"), [(2, 16, None, None), (1, 4, 0, 0), (3, 8, 5, 1)]
)
def test_windows_match_reference(to: int, h: int, pad_before: int | None, pad_after: int | None) -> None:
    buf = _buffer()
    sampler = WindowSampler(
        buf, n_obs_steps=to, horizon=h, pad_before=pad_before, pad_after=pad_after, source_boundaries="ignore"
    )
    ref = _reference(buf, to, h, sampler.pad_before, sampler.pad_after)
    assert len(sampler) == len(ref)
    if pad_before is None:
        assert len(sampler) == sum(LENGTHS)  # default padding: exactly one window per step
    batch = sampler.get(np.arange(len(sampler)))
    assert batch["obs"]["pos"].shape == (len(ref), to, 3)
    assert batch["obs"]["img"].shape == (len(ref), to, 4, 4, 3)
    assert batch["action"].shape == (len(ref), h, 5)
    for i, r in enumerate(ref):
        np.testing.assert_array_equal(batch["obs"]["pos"][i], r["pos"])
        np.testing.assert_array_equal(batch["obs"]["img"][i], r["img"])
        np.testing.assert_array_equal(batch["action"][i], r["action"])
        np.testing.assert_array_equal(batch["source"][i], r["source"])
        np.testing.assert_array_equal(batch["action_mask"][i], r["mask"])
        assert batch["episode_id"][i] == r["episode_id"] and batch["t"][i] == r["t"]


def test_obs_window_ends_at_anchor_and_actions_start_at_history() -> None:
    sampler = WindowSampler(_buffer(), n_obs_steps=2, horizon=16)
    batch = sampler.get(np.arange(len(sampler)))
    t_global = batch["obs"]["pos"][:, -1, 0].astype(int)
    ends = np.cumsum(LENGTHS)
    begins = ends - LENGTHS
    ep = np.searchsorted(ends, t_global, side="right")
    np.testing.assert_array_equal(t_global - begins[ep], batch["t"])
    # action[To-1] is the action taken at the anchor step t
    np.testing.assert_array_equal(batch["action"][:, 1], sampler.buffer.data["action"][t_global])


def test_loss_weights_follow_anchor_source() -> None:
    buf = _buffer()
    sampler = WindowSampler(buf, 2, 8, sample_weights={"recovery": 4.0, "demo": 0.5}, seed=1)
    batch = sampler.sample(256)
    anchor_src = buf.data["source"][sampler.anchors[np.arange(len(sampler))]]
    expected = np.where(
        anchor_src == SOURCE_CODES["recovery"], 4.0, np.where(anchor_src == SOURCE_CODES["demo"], 0.5, 1.0)
    )
    np.testing.assert_array_equal(sampler.window_sample_weights, expected)
    weight = batch["sample_weight"]
    assert weight.dtype == np.float32 and set(np.unique(weight)) <= {0.5, 1.0, 4.0}


def test_sample_mode_draws_proportionally_to_weight() -> None:
    buf = _buffer()
    sampler = WindowSampler(
        buf, 2, 8, sample_weights={"demo": 0.0, "recovery": 3.0}, sample_weight_mode="sample", seed=3
    )
    batch = sampler.sample(20_000)
    src_at_anchor = batch["source"][:, 1]
    assert not np.any(src_at_anchor == SOURCE_CODES["demo"])
    np.testing.assert_array_equal(batch["sample_weight"], 1.0)
    counts = np.bincount(buf.data["source"][sampler.anchors], minlength=4).astype(float)
    expected = counts * np.array([0.0, 1.0, 1.0, 3.0])
    freq = np.bincount(src_at_anchor, minlength=4) / len(src_at_anchor)
    np.testing.assert_allclose(freq, expected / expected.sum(), atol=0.02)


def test_mask_zero_weight_drops_only_zero_weight_action_targets() -> None:
    buf = _buffer()
    kw = {"sample_weights": {"demo": 0.0, "recovery": 3.0}, "sample_weight_mode": "sample"}
    plain = WindowSampler(buf, 2, 8, **kw).get(np.arange(sum(LENGTHS)))
    masked = WindowSampler(buf, 2, 8, mask_zero_sample_weight=True, **kw).get(np.arange(sum(LENGTHS)))
    zero = masked["source"] == SOURCE_CODES["demo"]
    assert zero.any() and not masked["action_mask"][zero].any()
    np.testing.assert_array_equal(masked["action_mask"][~zero], plain["action_mask"][~zero])
    np.testing.assert_array_equal(masked["action"], plain["action"])


def test_sampling_is_seeded() -> None:
    a = WindowSampler(_buffer(), seed=7).sample(64)
    b = WindowSampler(_buffer(), seed=7).sample(64)
    c = WindowSampler(_buffer(), seed=8).sample(64)
    np.testing.assert_array_equal(a["action"], b["action"])
    assert not np.array_equal(a["action"], c["action"])


def test_buffer_and_sampler_reject_bad_input() -> None:
    buf = _buffer()
    with pytest.raises(StoreError, match=r"data\['action'\]: has 52 rows, episode_ends says 53"):
        ReplayBuffer({**buf.data, "action": buf.data["action"][:-1]}, buf.episode_ends, buf.episode_ids)
    with pytest.raises(StoreError, match="episode_ends"):
        ReplayBuffer(buf.data, np.array([5, 5, 53]), [0, 1, 2])
    with pytest.raises(StoreError, match=r"sample_weights\['teleop'\]"):
        WindowSampler(buf, sample_weights={"teleop": 2.0})
    with pytest.raises(StoreError, match="horizon"):
        WindowSampler(buf, n_obs_steps=4, horizon=2)
    with pytest.raises(StoreError, match="every window has weight 0"):
        WindowSampler(
            buf,
            sample_weights={s: 0.0 for s in ("demo", "policy", "pre_intervention", "recovery")},
            sample_weight_mode="sample",
        )


def test_from_store_and_torch_adapters(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from rewind.store.torch_data import WindowBatches, WindowDataset

    with ReplayStore.create(tmp_path / "s", make_spec(image=True)) as store:
        episodes = [make_episode(i, image=True) for i in range(3)]
        for e in episodes:
            store.add_episode(**e)
        buf = ReplayBuffer.from_store(store, episodes=[2, 0], obs_keys=list(LOW_DIM))
    assert buf.episode_ids == [2, 0] and "obs/cam" not in buf.data
    np.testing.assert_array_equal(
        buf.episode_ends, np.cumsum([len(episodes[2]["actions"]), len(episodes[0]["actions"])])
    )
    np.testing.assert_array_equal(
        buf.data["obs/eef_pos"][: buf.episode_ends[0]], episodes[2]["obs"]["eef_pos"]
    )
    sampler = WindowSampler(buf, 2, 16, sample_weights={"recovery": 2.0})
    loader = torch.utils.data.DataLoader(WindowDataset(sampler), batch_size=8, shuffle=False)
    first = next(iter(loader))
    ref = sampler.get(np.arange(8))
    assert first["obs"]["eef_pos"].shape == (8, 2, 3)
    np.testing.assert_array_equal(first["action"].numpy(), ref["action"])
    np.testing.assert_array_equal(first["sample_weight"].numpy(), ref["sample_weight"])
    batches = list(WindowBatches(sampler, batch_size=4, n_batches=3))
    assert len(batches) == 3 and batches[0]["action_mask"].dtype == torch.bool
