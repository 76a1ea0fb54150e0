"""Fine-tuning options of rewind-train: ``init.from_weights`` and several stores with ``data.mix``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.train import train_config

from rewind.config import ConfigError
from rewind.store import SOURCE_CODES, ReplayStore
from rewind.train import run_train
from rewind.train.data import MixedSampler, load_data
from rewind.train.policy_api import resolve_weights
from rewind.train.trainer import Trainer, resume_signature

SHORT = {"steps": 10, "batch_size": 8, "warmup_steps": 2, "save_every": 10, "val_every": 0, "log_every": 5}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, tiny_run: dict[str, Path]) -> dict[str, Path]:
    """Store ``a`` (the session's 4 Lift demos) and store ``b`` (the same episodes relabelled
    ``correction``, actions scaled so that its statistics differ), plus the parent run trained on ``a``
    (the session's tiny run; only read)."""
    root = tmp_path_factory.mktemp("init_mix")
    a = tiny_run["store"]
    with ReplayStore.open(a) as src, ReplayStore.create(root / "b", src.spec) as dst:
        for info in src.episodes():
            ep = src.load(info.id)
            dst.add_episode(
                ep.obs,
                ep.actions * 0.5,
                ep.states,
                ["correction"] * info.length,
                meta={"seed": info.seed, "success": True},
            )
    return {"a": a, "b": root / "b", "parent": tiny_run["train"]}


def _trainer(out: Path, store: Path, **overrides: object) -> Trainer:
    cfg = train_config(out, store, train=SHORT, **overrides)
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        return Trainer(cfg)


def _parent_state(run: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``run``'s newest policy weights."""
    from safetensors.torch import load_file

    return load_file(str(resolve_weights(str(run)) / "model.safetensors"))


def test_init_loads_the_weights_and_keeps_their_normalizer(tmp_path: Path, stores: dict[str, Path]) -> None:
    parent = _parent_state(stores["parent"])
    t = _trainer(tmp_path / "ft", stores["b"], init={"from_weights": str(stores["parent"])})
    state = t.policy.state_dict()
    assert all(torch.equal(state[k], parent[k]) for k in parent)
    assert t.init_info["init_from"].endswith("weights/step_000030") and t.init_info["init_load_weights"]

    refit = _trainer(
        tmp_path / "refit", stores["b"], init={"from_weights": str(stores["parent"]), "normalizer": "refit"}
    )
    key = "normalizer.stats.action.scale"
    assert torch.allclose(refit.policy.state_dict()[key], 0.5 * parent[key])  # fitted to store b
    net = "unet.up.0.2.film.1.weight"
    assert torch.equal(refit.policy.state_dict()[net], parent[net])


def test_init_normalizer_only_is_a_fresh_network(tmp_path: Path, stores: dict[str, Path]) -> None:
    parent = _parent_state(stores["parent"])
    init = {"from_weights": str(stores["parent"]), "load_weights": False}
    state = _trainer(tmp_path / "fs", stores["b"], init=init).policy.state_dict()
    assert torch.equal(state["normalizer.stats.action.scale"], parent["normalizer.stats.action.scale"])
    assert not torch.equal(state["unet.up.0.2.film.1.weight"], parent["unet.up.0.2.film.1.weight"])


def test_init_lineage_in_the_saved_weights(tmp_path: Path, stores: dict[str, Path]) -> None:
    out = tmp_path / "ft"
    data = {
        "path": str(stores["a"]),
        "extra_paths": [str(stores["b"])],
        "mix": [0.2, 0.8],
        "val_fraction": 0.25,
    }
    run_train(
        train_config(out, stores["a"], train=SHORT, data=data, init={"from_weights": str(stores["parent"])})
    )
    extra = json.loads((out / "weights" / "step_000010" / "config.json").read_text())["extra"]
    assert extra["init_from"].endswith("step_000030") and len(extra["init_weights_sha256"]) == 64
    assert set(extra["stores"]) == {str(stores["a"]), str(stores["b"])}
    assert sorted(extra["stores"][str(stores["b"])]["train"] + extra["stores"][str(stores["b"])]["val"]) == [
        0,
        1,
        2,
        3,
    ]


def test_init_accepts_weights_saved_before_a_config_field_existed(
    tmp_path: Path, stores: dict[str, Path]
) -> None:
    """An older ``config.json`` lacks fields added since (here ``obs_clip``); loading it gives their
    defaults, so it equals today's default config, and a non-default value is still refused."""
    import json
    import shutil

    old = tmp_path / "old_weights"
    shutil.copytree(stores["parent"] / "weights" / "step_000030", old)
    meta = json.loads((old / "config.json").read_text())
    del meta["config"]["obs_clip"]
    (old / "config.json").write_text(json.dumps(meta))
    t = _trainer(tmp_path / "ft", stores["b"], init={"from_weights": str(old)})
    assert t.init_info["init_from"] == str(old)
    cfg = train_config(tmp_path / "x", stores["b"], train=SHORT, init={"from_weights": str(old)})
    cfg.policy["obs_clip"] = 2.0
    with pytest.raises(ConfigError, match=r"differs from the weights' in policy.obs_clip"):
        Trainer(cfg)


def test_init_refuses_another_policy_config(tmp_path: Path, stores: dict[str, Path]) -> None:
    cfg = train_config(tmp_path / "x", stores["b"], train=SHORT, init={"from_weights": str(stores["parent"])})
    cfg.policy["down_dims"] = [8, 16]
    with pytest.raises(ConfigError, match=r"differs from the weights' in policy.down_dims"):
        Trainer(cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        _trainer(tmp_path / "y", stores["b"], init={"from_weights": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="takes nothing"):
        train_config(
            tmp_path / "z",
            stores["b"],
            init={"from_weights": "w", "load_weights": False, "normalizer": "refit"},
        )


def test_mixed_sampler_draws_the_shares(stores: dict[str, Path]) -> None:
    cfg = train_config(
        Path("/tmp/unused"),
        stores["a"],
        data={
            "path": str(stores["a"]),
            "extra_paths": [str(stores["b"])],
            "mix": [0.2, 0.8],
            "val_fraction": 0.0,
        },
    ).data
    data = load_data(cfg, 2, 8, seed=0, env_id="rewind/Lift-v0")
    assert isinstance(data.train, MixedSampler)
    sources = np.concatenate([data.train.sample(64)["source"][:, 1] for _ in range(50)])
    share = float(np.mean(sources == SOURCE_CODES["correction"]))
    assert 0.75 < share < 0.85
    concat = load_data(
        type(cfg)(path=cfg.path, extra_paths=cfg.extra_paths, val_fraction=0.0), 2, 8, 0, "rewind/Lift-v0"
    )
    assert len(concat.train) == len(data.train) and concat.train.buffer.n_steps == data.train.buffer.n_steps


def test_mixed_run_resumes_exactly_and_old_signatures_still_match(
    tmp_path: Path, stores: dict[str, Path]
) -> None:
    data = {
        "path": str(stores["a"]),
        "extra_paths": [str(stores["b"])],
        "mix": [0.5, 0.5],
        "val_fraction": 0.25,
    }
    run_train(train_config(tmp_path / "full", stores["a"], train=SHORT, data=data))
    run_train(
        train_config(tmp_path / "cut", stores["a"], train={**SHORT, "save_every": 5}, data=data), stop_at=7
    )
    run_train(
        train_config(tmp_path / "cut", stores["a"], train={**SHORT, "save_every": 5}, data=data, resume=True)
    )
    a = _parent_state(tmp_path / "full")
    b = _parent_state(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)
    sig = resume_signature(train_config(tmp_path / "s", stores["a"]))
    assert "init" not in sig and "mix" not in sig["data"] and "extra_paths" not in sig["data"]


def test_bad_mix_is_a_config_error(tmp_path: Path, stores: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="one share per store"):
        train_config(tmp_path, stores["a"], data={"path": "p", "extra_paths": ["q"], "mix": [1.0]})
    with pytest.raises(ConfigError, match="positive sum"):
        train_config(tmp_path, stores["a"], data={"path": "p", "mix": [0.0]})
