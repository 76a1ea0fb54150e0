"""Policy weights I/O (safetensors + JSON), normalizer and encoders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.policies import DA, SHAPE_META, B, H, build, make_batch

from rewind.policies.encoders import ImageEncoder, LowDimEncoder
from rewind.policies.io import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    PolicyWeightsError,
    load_policy_weights,
    read_policy_meta,
    save_policy_weights,
    weights_hash,
)
from rewind.policies.normalizer import Normalizer
from rewind.policies.shape_meta import shape_meta_from_spec
from rewind.store import StoreSpec
from rewind.utils.seeding import torch_generator


@pytest.mark.parametrize("variant", ["ddim-sample", "flow"])
def test_round_trip_gives_identical_predictions(tmp_path, variant: str) -> None:
    policy = build(variant, image_keys=["rgb"]).eval()
    obs = make_batch(image=True)["obs"]
    save_policy_weights(policy, tmp_path, extra_meta={"env_id": "rewind/Lift-v0"})
    loaded = load_policy_weights(tmp_path, expect_shape_meta=SHAPE_META)
    assert type(loaded) is type(policy) and not loaded.training
    want = policy.predict_chunk(obs, 2, torch_generator(5))
    assert torch.equal(want, loaded.predict_chunk(obs, 2, torch_generator(5)))
    meta = read_policy_meta(tmp_path)
    assert meta["policy_type"] == policy.name and meta["extra"] == {"env_id": "rewind/Lift-v0"}
    assert meta["shape_meta"]["action_dim"] == DA and meta["config"]["horizon"] == H
    assert {"torch", "diffusers", "safetensors", "numpy"} <= set(meta["versions"])
    assert meta["weights_sha256"] == weights_hash(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]


def test_layout_mismatch_names_key_and_shapes(tmp_path) -> None:
    save_policy_weights(build("flow"), tmp_path)
    other = json.loads(json.dumps(SHAPE_META))
    other["obs"]["state"]["shape"] = [7]
    with pytest.raises(
        PolicyWeightsError, match=r"obs key 'state': weights have shape \[5\] float32, expected \[7\]"
    ):
        load_policy_weights(tmp_path, expect_shape_meta=other)
    other = dict(SHAPE_META, action_dim=DA + 1)
    with pytest.raises(PolicyWeightsError, match=f"action_dim: weights have {DA}, expected {DA + 1}"):
        load_policy_weights(tmp_path, expect_shape_meta=other)
    rgb_only = {"obs": {"rgb": SHAPE_META["obs"]["rgb"]}, "action_dim": DA}  # unused key ok, used one missing
    with pytest.raises(PolicyWeightsError, match="'state': used by the weights but missing"):
        load_policy_weights(tmp_path, expect_shape_meta=rgb_only)


def test_state_shape_mismatch_names_tensor(tmp_path) -> None:
    save_policy_weights(build("flow"), tmp_path)
    meta = json.loads((tmp_path / CONFIG_FILE).read_text())
    meta["config"]["obs_feature_dim"] = 48
    (tmp_path / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(PolicyWeightsError, match=r"model.safetensors: .*file has shape \[32.*expects \[48"):
        load_policy_weights(tmp_path)


def test_corrupted_or_missing_files_are_named(tmp_path) -> None:
    save_policy_weights(build("ddim-eps"), tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(PolicyWeightsError, match=f"{WEIGHTS_FILE}: corrupted"):
        load_policy_weights(tmp_path)
    weights.write_bytes(b"not a safetensors file")
    meta = json.loads((tmp_path / CONFIG_FILE).read_text())
    meta["weights_sha256"] = weights_hash(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(PolicyWeightsError, match=f"{WEIGHTS_FILE}: unreadable safetensors"):
        load_policy_weights(tmp_path)
    weights.unlink()
    with pytest.raises(PolicyWeightsError, match=f"{WEIGHTS_FILE}: missing"):
        load_policy_weights(tmp_path)
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(PolicyWeightsError, match=f"{CONFIG_FILE}: unreadable"):
        load_policy_weights(tmp_path)
    with pytest.raises(PolicyWeightsError, match=f"{CONFIG_FILE}: missing"):
        load_policy_weights(tmp_path / "nowhere")


def test_shape_meta_from_store_spec() -> None:
    spec = StoreSpec(
        obs={"q": ((4,), "float32"), "cam": ((8, 8, 3), "uint8")}, action_dim=2, state_dim=3, env_id="x"
    )
    assert shape_meta_from_spec(spec) == {
        "obs": {"q": {"shape": [4], "dtype": "float32"}, "cam": {"shape": [8, 8, 3], "dtype": "uint8"}},
        "action_dim": 2,
    }


@pytest.mark.parametrize("mode", ["min_max", "mean_std"])
def test_normalizer_round_trip_and_constant_dims(mode: str) -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(500, 4))
    data[:, 2] = 7.0  # a constant dimension
    norm = Normalizer({"action": (4, mode)}).fit({"action": data, "source": np.zeros(500)})
    x = torch.as_tensor(data, dtype=torch.float32).reshape(50, 10, 4)
    y = norm.normalize("action", x)
    assert torch.allclose(norm.unnormalize("action", y), x, atol=1e-5)
    assert torch.all(y[..., 2] == 0)
    assert abs(norm.normalize("action", x + 0.01)[..., 2]).max() < 0.02  # no 1/eps blow-up
    if mode == "min_max":
        assert y[..., [0, 1, 3]].min().item() == pytest.approx(-1) and y[
            ..., [0, 1, 3]
        ].max().item() == pytest.approx(1)
    restored = Normalizer({"action": (4, mode)})
    restored.load_state_dict(norm.state_dict())
    assert torch.equal(restored.normalize("action", x), y)


def test_normalizer_clips_observations_not_actions() -> None:
    """A dimension with a tiny demo range (an upright cube's quaternion) must not become a huge input
    outside it; actions keep their exact inverse."""
    rng = np.random.default_rng(1)
    data = rng.uniform(-1, 1, size=(200, 3))
    data[:, 1] = rng.uniform(0.999, 1.001, size=200)  # tiny but nonzero range
    specs = {"obs/q": (3, "min_max"), "action": (3, "min_max")}
    clipped = Normalizer(specs, obs_clip=5.0).fit({"obs/q": data, "action": data})
    free = Normalizer(specs).fit({"obs/q": data, "action": data})
    x = torch.tensor([[0.5, 0.97, -3.0]])  # 0.03 off on the tiny-range dim: about 30 range units
    assert free.normalize("obs/q", x).abs().max() > 20
    y = clipped.normalize("obs/q", x)
    assert y.abs().max() == pytest.approx(5.0)
    assert torch.allclose(y[0, 0], free.normalize("obs/q", x)[0, 0])  # in-range values untouched
    assert clipped.normalize("action", x).abs().max() > 20
    assert torch.allclose(clipped.unnormalize("action", clipped.normalize("action", x)), x, atol=1e-5)
    inside = torch.as_tensor(data, dtype=torch.float32)
    assert torch.equal(clipped.normalize("obs/q", inside), free.normalize("obs/q", inside))


def test_policy_config_rejects_bad_obs_clip() -> None:
    from rewind.policies.diffusion.configuration_diffusion import DiffusionConfig

    with pytest.raises(ValueError, match="obs_clip must be > 0 or null; got 0"):
        DiffusionConfig(obs_clip=0)
    assert DiffusionConfig(obs_clip=None).obs_clip is None


def test_normalizer_images_and_errors() -> None:
    norm = Normalizer({"obs/rgb": (0, "image"), "action": (2, "min_max")})
    img = torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8)
    assert torch.equal(norm.unnormalize("obs/rgb", norm.normalize("obs/rgb", img)), img)
    with pytest.raises(RuntimeError, match="not fitted"):
        norm.normalize("action", torch.zeros(2))
    with pytest.raises(KeyError, match="no data for 'action'"):
        norm.fit({"obs/rgb": img.numpy()})
    with pytest.raises(KeyError, match="unknown key 'obs/x'"):
        norm.normalize("obs/x", torch.zeros(2))


def test_encoders_shapes_and_seeded_crops() -> None:
    low = LowDimEncoder(["a", "b"], {"a": 3, "b": 2}, n_obs_steps=2, feature_dim=16)
    obs = {"a": torch.randn(B, 2, 3), "b": torch.randn(B, 2, 2), "cam": torch.rand(B, 2, 12, 12, 3)}
    assert low(obs).shape == (B, 16)
    per_step = LowDimEncoder(["a"], {"a": 3}, n_obs_steps=2, feature_dim=8, mode="per_step")
    assert per_step(obs).shape == (B, 16) and per_step.out_dim == 16
    for pool in ("spatial_softmax", "avg"):
        enc = ImageEncoder(
            ["cam"], (12, 12, 3), 2, crop_ratio=0.75, pool=pool, image_feature_dim=8, low_dim=low
        )
        out = enc(obs, torch_generator(0))
        assert out.shape == (B, enc.out_dim) and enc.out_dim == 2 * 8 + 16
        assert torch.equal(out, enc(obs, torch_generator(0)))
        assert not torch.equal(out, enc(obs, torch_generator(1)))


def test_make_config_checks_field_types_of_a_loaded_mapping() -> None:
    """A config read from JSON can hold any value: each must fit its field's annotation."""
    from rewind.policies.registry import make_config

    cases = [
        ("diffusion", {"horizon": "8"}, "horizon must be int; got '8' (str)"),
        ("diffusion", {"horizon": 8.0}, "horizon must be int; got 8.0 (float)"),
        ("flow", {"clip_sample": 1}, "clip_sample must be bool; got 1 (int)"),
        ("flow", {"obs_clip": "5"}, "obs_clip must be a finite number or null; got '5' (str)"),
        ("act", {"dropout": float("nan")}, "dropout must be a finite number; got nan (float)"),
        ("act", {"image_keys": ["rgb", 3]}, "image_keys must be a list of str; got ['rgb', 3] (list)"),
        ("diffusion", {"num_inference_steps": [3]}, "num_inference_steps must be int or null; got [3]"),
    ]
    for name, fields, message in cases:
        with pytest.raises(ValueError) as caught:
            make_config(name, fields)
        assert message in str(caught.value)
    with pytest.raises(ValueError, match="config must be a mapping of fields; got list"):
        make_config("flow", [1, 2])
    cfg = make_config("diffusion", {"down_dims": [16, 32], "horizon": 8, "n_action_steps": 4, "beta_end": 1})
    assert cfg.down_dims == (16, 32) and cfg.beta_end == 1  # lists for tuples, ints for floats
