"""Fast tests of the ACT policy (tiny transformer, CPU, a few seconds in all)."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rewind.config import ConfigError, to_dataclass
from rewind.policies.act import ACTConfig, ACTPolicy
from rewind.policies.act.ensemble import ACTPolicyState, TemporalEnsembler
from rewind.policies.base import PolicyState, count_parameters
from rewind.utils.seeding import torch_generator

B, S, DA, TO, H = 3, 2, 4, 2, 8
SHAPE_META = {"obs": {"state": {"shape": [7], "dtype": "float32"}}, "action_dim": DA}
TINY = ACTConfig(
    n_obs_steps=TO,
    horizon=H,
    n_action_steps=4,
    d_model=32,
    n_heads=2,
    dim_feedforward=64,
    n_encoder_layers=1,
    n_decoder_layers=1,
    n_vae_encoder_layers=1,
    latent_dim=8,
    obs_feature_dim=32,
    dropout=0.0,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest single-threaded (and do not fight other jobs for cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(config: ACTConfig = TINY, seed: int = 0) -> ACTPolicy:
    """A policy whose initialisation is seeded without leaking global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ACTPolicy(config, SHAPE_META)


def make_batch(seed: int = 0) -> dict:
    """A window batch in env units (actions far from zero mean / unit scale)."""
    g = torch_generator(seed)
    mask = torch.ones(B, H, dtype=torch.bool)
    mask[0, -2:] = False
    return {
        "obs": {"state": torch.randn(B, TO, 7, generator=g)},
        "action": 5.0 + 3.0 * torch.randn(B, H, DA, generator=g),
        "action_mask": mask,
        "sample_weight": torch.tensor([1.0, 2.0, 0.5]),
    }


def fitted(policy: ACTPolicy, batch: dict) -> ACTPolicy:
    """Fit the normalizer to the batch's observations and actions."""
    policy.fit_normalizer(
        {
            "obs/state": batch["obs"]["state"].reshape(-1, 7).numpy(),
            "action": batch["action"].reshape(-1, DA).numpy(),
        }
    )
    return policy


def step_obs(batch: dict, t: int) -> dict:
    """Single-step observation ``[B, 7]`` from the batch's window."""
    return {"state": batch["obs"]["state"][:, t % TO]}


def test_shapes_and_sample_zero_is_the_prior_mean() -> None:
    policy = fitted(build(), make_batch()).eval()
    batch = make_batch()
    gen = torch_generator(1)
    chunks = policy.predict_chunk(batch["obs"], num_samples=S, generator=gen)
    assert chunks.shape == (B, S, H, DA)
    assert policy.encode(batch["obs"]).shape == (B, TINY.d_model)
    assert policy.compute_loss(batch).shape == ()
    single = policy.predict_chunk(batch["obs"])
    assert single.shape == (B, 1, H, DA)
    torch.testing.assert_close(chunks[:, 0], single[:, 0])  # z = 0 for sample 0
    assert not torch.allclose(chunks[:, 1], chunks[:, 0])  # z ~ N(0, I) for the others
    action = policy.select_action(step_obs(batch, 0), num_samples=S, generator=gen)
    assert action.shape == (B, DA)
    assert policy.last_chunks[-1].samples.shape == (B, S, H, DA)


def test_loss_decreases_when_overfitting_and_outputs_are_env_units() -> None:
    batch = make_batch()
    policy = fitted(build(), batch)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    gen = torch_generator(0)
    losses = []
    for _ in range(150):
        terms = policy.compute_loss_terms(batch, generator=gen)
        opt.zero_grad()
        terms["loss"].backward()
        opt.step()
        losses.append(float(terms["l1"]))
    assert losses[-1] < 0.5 * losses[0], losses[::25]
    pred = policy.eval().predict_chunk(batch["obs"])[:, 0]
    err = (pred - batch["action"]).abs()[batch["action_mask"]].mean()
    assert err < 0.3 * batch["action"].std(), float(err)  # env units: scale 3, offset 5


def test_seeded_determinism() -> None:
    batch = make_batch()
    results = []
    for _ in range(2):
        policy = fitted(build(seed=7), batch)
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
        gen = torch_generator(3)
        for _ in range(3):
            loss = policy.compute_loss(batch, generator=gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
        results.append((loss.detach(), policy.eval().predict_chunk(batch["obs"], S, torch_generator(5))))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=0, atol=0)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)
    other = build(seed=8)
    assert not torch.equal(next(other.parameters()), next(build(seed=7).parameters()))


@pytest.mark.skipif(
    importlib.util.find_spec("rewind.policies.io") is None, reason="rewind.policies.io not written yet"
)
def test_save_load_round_trip(tmp_path: Path) -> None:
    from rewind.policies.io import load_policy_weights, read_policy_meta, save_policy_weights

    batch = make_batch()
    policy = fitted(build(replace(TINY, kl_weight=3.0)), batch).eval()
    save_policy_weights(policy, tmp_path / "weights", extra_meta={"note": "act"})
    loaded = load_policy_weights(tmp_path / "weights", device="cpu", expect_shape_meta=SHAPE_META)
    assert isinstance(loaded, ACTPolicy) and loaded.config == policy.config
    assert read_policy_meta(tmp_path / "weights")["extra"] == {"note": "act"}
    assert not loaded.training
    gen_a, gen_b = torch_generator(2), torch_generator(2)
    torch.testing.assert_close(
        loaded.predict_chunk(batch["obs"], S, gen_a), policy.predict_chunk(batch["obs"], S, gen_b)
    )
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.pkl"))


def test_temporal_ensembling_actions_and_state_round_trip() -> None:
    config = replace(TINY, n_action_steps=1, temporal_ensemble_coeff=0.1)
    policy = fitted(build(config), make_batch()).eval()
    batch = make_batch(1)
    for t in range(5):
        action = policy.select_action(step_obs(batch, t))
        assert action.shape == (B, DA) and torch.isfinite(action).all()
        assert policy.queued_actions() == []  # every step infers: nothing for a runner to step ahead
    older, newer = policy.last_chunks
    assert (newer.start_step - older.start_step == 1).all()  # a chunk every step
    saved = policy.get_state()
    assert isinstance(saved, ACTPolicyState) and len(saved.ensemble) == 5
    first = [policy.select_action(step_obs(batch, t)) for t in range(5, 12)]
    policy.set_state(saved)
    again = [policy.select_action(step_obs(batch, t)) for t in range(5, 12)]
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert len(policy.get_state().ensemble) == H - TO + 1  # capped at L = H - To + 1
    policy.set_state(PolicyState())  # a plain state from generic code: empty ensemble
    policy.reset()
    assert policy.get_state().ensemble == [] and policy.last_chunks == []


def test_ensembler_weights_oldest_first() -> None:
    ens = TemporalEnsembler(coeff=math.log(2.0), length=3)
    pending: list[torch.Tensor] = []
    for value in (1.0, 2.0, 3.0):  # chunk k predicts the constant k for every step
        pending = ens.push(pending, torch.full((1, 3, 1), value))
    # weights 1, 1/2, 1/4 (oldest first) over predictions 1, 2, 3
    expected = (1.0 + 2.0 / 2 + 3.0 / 4) / (1 + 0.5 + 0.25)
    torch.testing.assert_close(ens.action(pending), torch.tensor([[expected]]))
    assert len(ens.push(pending, torch.zeros(1, 3, 1))) == 3


def test_nan_observation_raises_clear_error() -> None:
    batch = make_batch()
    policy = fitted(build(), batch).eval()
    batch["obs"]["state"][1, 0, 3] = float("nan")
    with pytest.raises(ValueError, match=r"obs\['state'\].*NaN"):
        policy.predict_chunk(batch["obs"])
    with pytest.raises(ValueError, match="NaN"):
        policy.compute_loss(batch)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"kl_weight": -1.0}, "kl_weight"),
        ({"n_heads": 3}, "n_heads"),
        ({"dropout": 1.0}, "dropout"),
        ({"n_action_steps": 17}, "n_action_steps"),
        ({"temporal_ensemble_coeff": 0.01}, "n_action_steps"),
        ({"temporal_ensemble_coeff": -1.0, "n_action_steps": 1}, "temporal_ensemble_coeff"),
        ({"latent_dim": 0}, "latent_dim"),
    ],
)
def test_config_validation_names_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ACTConfig(**overrides)
    with pytest.raises(ConfigError, match=field):
        to_dataclass(overrides, ACTConfig)


def test_registered_and_small() -> None:
    from rewind.policies.registry import make_policy

    policy = make_policy("act", TINY, SHAPE_META)
    assert isinstance(policy, ACTPolicy)
    assert 0 < count_parameters(policy) < 100_000


def test_image_and_per_step_tokens() -> None:
    meta = {
        "obs": {"state": {"shape": [7], "dtype": "float32"}, "rgb": {"shape": [16, 16, 3], "dtype": "uint8"}},
        "action_dim": DA,
    }
    config = replace(TINY, image_keys=["rgb"], image_feature_dim=8, low_dim_mode="per_step")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = ACTPolicy(config, meta)
    assert (policy.n_image_tokens, policy.n_low_tokens) == (TO, TO)  # one per camera-step, one per step
    batch = make_batch()
    g = torch_generator(0)
    batch["obs"]["rgb"] = torch.randint(0, 256, (B, TO, 16, 16, 3), dtype=torch.uint8, generator=g)
    policy.fit_normalizer({"obs/state": batch["obs"]["state"].numpy(), "action": batch["action"].numpy()})
    loss = policy.compute_loss(batch, generator=g)
    loss.backward()
    assert torch.isfinite(loss)
    assert policy.eval().predict_chunk(batch["obs"], S, g).shape == (B, S, H, DA)
