"""Diffusion (DDIM/DDPM x epsilon/sample) and flow policies: shapes, overfitting, seeding, inputs,
images, guidance, EMA, CUDA. Tiny models; the whole file runs in well under a minute on CPU."""

from __future__ import annotations

import pytest
import torch
from helpers.policies import DA, SHAPE_META, TINY, VARIANTS, B, H, S, build, make_batch

from rewind.policies.diffusion import DiffusionConfig
from rewind.policies.ema import ema_weights, load_ema_state, make_ema, save_ema_state
from rewind.policies.flow import FlowConfig
from rewind.policies.guidance import gradient_guidance
from rewind.policies.registry import make_config, make_policy
from rewind.utils.seeding import torch_generator


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_shapes(variant: str) -> None:
    policy = build(variant).eval()
    obs = make_batch()["obs"]
    chunks = policy.predict_chunk(obs, num_samples=S, generator=torch_generator(0))
    assert chunks.shape == (B, S, H, DA) and torch.isfinite(chunks).all()
    assert policy.encode(obs).shape == (B, policy.feature_dim)
    step_obs = {k: v[:, -1] for k, v in obs.items()}
    for _ in range(5):  # 4 queued actions, then a second chunk
        assert policy.select_action(step_obs, generator=torch_generator(1)).shape == (B, DA)
    assert [c.actions.shape for c in policy.last_chunks] == [(B, H, DA)] * 2


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_overfits_a_fixed_batch(variant: str) -> None:
    policy = build(variant).train()
    batch = make_batch()
    before = policy.compute_loss(batch, generator=torch_generator(7)).item()
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    for _ in range(30):
        loss = policy.compute_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = policy.compute_loss(batch, generator=torch_generator(7)).item()
    assert after < 0.7 * before, (before, after)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_seeded_sampling_is_deterministic(variant: str) -> None:
    policy = build(variant).eval()
    obs = make_batch()["obs"]
    a = policy.predict_chunk(obs, S, generator=torch_generator(3))
    b = policy.predict_chunk(obs, S, generator=torch_generator(3))
    c = policy.predict_chunk(obs, S, generator=torch_generator(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_training_loss_is_seeded_and_weighted() -> None:
    policy = build("ddim-eps")
    batch = make_batch()
    l1 = policy.compute_loss(batch, generator=torch_generator(0))
    assert torch.equal(l1, policy.compute_loss(batch, generator=torch_generator(0)))
    zero = dict(batch, sample_weight=torch.zeros(B))
    assert policy.compute_loss(zero, generator=torch_generator(0)).item() == 0.0
    with pytest.raises(ValueError, match="batch key 'weight' is now 'sample_weight'"):  # not ignored silently
        policy.compute_loss(dict(batch, weight=torch.zeros(B)))


def test_nan_observation_raises() -> None:
    policy = build("flow").eval()
    obs = make_batch()["obs"]
    obs["state"][1, 0, 2] = float("nan")
    with pytest.raises(ValueError, match="obs\\['state'\\] contains NaN"):
        policy.predict_chunk(obs)
    with pytest.raises(KeyError, match="'state' missing"):
        policy.encode({})


@pytest.mark.parametrize("variant", ["ddim-eps", "flow"])
def test_image_config_trains_end_to_end(variant: str) -> None:
    policy = build(variant, image_keys=["rgb"], image_crop_ratio=0.8).train()
    batch = make_batch(image=True)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    for _ in range(3):
        loss = policy.compute_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.isfinite(loss)
    cnn = policy.obs_encoder.backbones["rgb"]
    assert all(p.grad is not None for p in cnn.parameters())
    policy.eval()
    assert policy.predict_chunk(batch["obs"], 2, torch_generator(0)).shape == (B, 2, H, DA)
    assert torch.equal(policy.encode(batch["obs"]), policy.encode(batch["obs"]))  # center crop at eval


@pytest.mark.parametrize("variant", ["ddim-eps", "ddim-sample", "flow"])
def test_guidance_pulls_samples_toward_target(variant: str) -> None:
    policy = build(variant).eval()
    obs = make_batch()["obs"]
    target = torch.full((H, DA), 0.5)
    guide = gradient_guidance(lambda x: (x - target).pow(2).sum(), scale=0.3)
    plain = policy.predict_chunk(obs, 1, torch_generator(0))
    guided = policy.predict_chunk(obs, 1, torch_generator(0), guidance=guide)
    off = policy._sample_chunk(obs, 1, torch_generator(0), guidance=guide, guidance_last_k=0)
    goal = policy.normalizer.unnormalize("action", target)
    assert torch.equal(off, plain)
    assert (guided - goal).abs().mean() < (plain - goal).abs().mean()


def test_ema_step_swap_and_safetensors_round_trip(tmp_path) -> None:
    policy = build("ddim-eps")
    ema = make_ema(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        policy.compute_loss(make_batch()).backward()
        opt.step()
        ema.step(policy.parameters())
    live = [p.detach().clone() for p in policy.parameters()]
    with ema_weights(ema, policy):
        averaged = [p.detach().clone() for p in policy.parameters()]
    assert all(torch.equal(a, p) for a, p in zip(live, policy.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(live, averaged, strict=True))
    save_ema_state(ema, policy, tmp_path)
    other = make_ema(build("ddim-eps", seed=1))
    load_ema_state(other, policy, tmp_path)
    assert other.optimization_step == ema.optimization_step
    assert all(torch.equal(a, b) for a, b in zip(ema.shadow_params, other.shadow_params, strict=True))


def test_config_validation_and_registry_errors() -> None:
    with pytest.raises(ValueError, match=r"scheduler must be one of \[ddim, ddpm\]; got 'euler'"):
        DiffusionConfig(scheduler="euler")
    with pytest.raises(ValueError, match="divisible by"):
        DiffusionConfig(horizon=10, down_dims=(8, 16, 32))
    with pytest.raises(ValueError, match="num_inference_steps"):
        DiffusionConfig(scheduler="ddpm", num_inference_steps=10)
    with pytest.raises(ValueError, match=r"time_sampling must be one of \[uniform, logit_normal\]"):
        FlowConfig(time_sampling="beta")
    assert (
        DiffusionConfig().inference_steps == 10 and DiffusionConfig(scheduler="ddpm").inference_steps == 100
    )
    with pytest.raises(KeyError, match="unknown policy 'nope'; valid: .*'diffusion'.*'flow'"):
        make_policy("nope", {}, SHAPE_META)
    with pytest.raises(ValueError, match=r"unknown FlowConfig fields \['bogus'\]"):
        make_config("flow", {"bogus": 1})
    with pytest.raises(ValueError, match="obs key 'missing' is not in shape_meta"):
        make_policy("flow", {**TINY, "obs_keys": ["missing"]}, SHAPE_META)
    assert make_config("diffusion", {"down_dims": [16, 32], "horizon": 8, "n_action_steps": 4}).down_dims == (
        16,
        32,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("variant", ["ddim-eps", "flow"])
def test_cuda_bf16_forward(variant: str) -> None:
    policy = build(variant, image_keys=["rgb"]).to("cuda")
    batch = make_batch(image=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = policy.compute_loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    policy.eval()
    chunks = policy.predict_chunk(batch["obs"], S, generator=torch_generator(0, "cuda"))
    assert chunks.device.type == "cuda" and chunks.shape == (B, S, H, DA)
    assert torch.equal(chunks, policy.predict_chunk(batch["obs"], S, generator=torch_generator(0, "cuda")))
