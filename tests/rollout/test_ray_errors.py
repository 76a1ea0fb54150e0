"""``rollout.backend=ray``'s one-line errors, with or without Ray installed: Ray missing (says how to
install it), an address nobody answers at (named, within seconds), bad options."""

from __future__ import annotations

import sys
import time

import pytest

from rewind.config import ConfigError
from rewind.rollout.config import RolloutConfig
from rewind.rollout.ray_backend import RayOptions, RayRolloutError, check_reachable, ray_session, require_ray


def test_missing_ray_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    with pytest.raises(
        RayRolloutError, match=r"needs Ray, which is not installed: pip install 'rewind\[ray\]'"
    ):
        require_ray()
    with pytest.raises(RayRolloutError) as exc, ray_session(RayOptions()):
        pass
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_address_is_named_within_seconds(address: str) -> None:
    start = time.monotonic()
    with pytest.raises(RayRolloutError, match=f"rollout.address={address}: no Ray cluster reachable there"):
        check_reachable(address, timeout_s=2.0)
    assert time.monotonic() - start < 30  # ray.init alone retries such an address for minutes


def test_an_unreachable_address_fails_before_ray_init() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    with pytest.raises(RayRolloutError, match=r"rollout.address=127.0.0.1:1: no Ray cluster") as exc:
        with ray_session(RayOptions(address="127.0.0.1:1")):
            pass
    assert "\n" not in str(exc.value) and not ray.is_initialized()


def test_bad_options_and_addresses() -> None:
    with pytest.raises(ConfigError, match=r"rollout.actors must be in \[1, 1024\]; got 0"):
        RayOptions(actors=0)
    with pytest.raises(ConfigError, match=r"rollout.max_retries must be in \[0, 100\]; got -1"):
        RayOptions(max_retries=-1)
    with pytest.raises(ConfigError, match=r"rollout.unit_timeout_s must be >= 0; got -1"):
        RayOptions(unit_timeout_s=-1)
    assert RolloutConfig(backend="ray", unit_timeout_s=5).ray_options().unit_timeout_s == 5
    assert RolloutConfig().ray_options() == RayOptions()  # one set of defaults
    with pytest.raises(RayRolloutError, match="rollout.address=headnode: expected HOST:PORT"):
        check_reachable("headnode")


def _eval_args(tiny_run, tmp_path) -> list[str]:
    return [
        f"policy_path={tiny_run['train']}",
        "env=lift",
        "episodes=1",
        "device=cpu",
        "rollout.backend=ray",
        "wandb.mode=disabled",
        "progress=false",
        f"out_dir={tmp_path}",
    ]


def test_rewind_eval_without_ray_is_one_line(tiny_run, tmp_path, monkeypatch, capsys) -> None:
    from helpers.train import run_cli

    from rewind.scripts.eval import main as eval_main

    monkeypatch.setitem(sys.modules, "ray", None)
    assert run_cli(eval_main, _eval_args(tiny_run, tmp_path / "a")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(
        "rollout.backend=ray needs Ray, which is not installed: pip install 'rewind[ray]' (or: pip install ray)"
    )
    assert run_cli(eval_main, [*_eval_args(tiny_run, tmp_path / "b"), "video.episodes=1"]) == 2
    assert "video.episodes needs rollout.backend=local" in capsys.readouterr().err


def test_rewind_eval_with_an_unreachable_address_names_it(tiny_run, tmp_path, capsys) -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    from helpers.train import run_cli

    from rewind.scripts.eval import main as eval_main

    args = [*_eval_args(tiny_run, tmp_path), "rollout.address=127.0.0.1:1"]
    assert run_cli(eval_main, args) == 2
    assert "error: rollout.address=127.0.0.1:1: no Ray cluster reachable there" in capsys.readouterr().err
