"""The fine-tuning mix: the rounds' share, and its cap by passes over their data."""

import pytest

from rewind.config import ConfigError
from rewind.loop.config import FinetuneConfig
from rewind.loop.stages import mix_shares


def test_uncapped_mix_splits_the_rest_by_steps() -> None:
    assert mix_shares(0.2, [300, 100]) == pytest.approx([0.2, 0.6, 0.2])
    assert mix_shares(None, [300]) == [] and mix_shares(0.2, []) == []


def test_passes_cap_shrinks_the_rounds_share() -> None:
    # 600 steps x batch 64 = 38,400 windows; 1,255 useful steps at 80% would be ~24.5 passes
    mix = mix_shares(0.2, [1255], max_passes=4, samples=600 * 64)
    assert mix[1] * 600 * 64 == pytest.approx(4 * 1255)
    assert sum(mix) == pytest.approx(1.0) and mix[0] > 0.8
    big = mix_shares(0.2, [20000], max_passes=4, samples=600 * 64)  # a large store stays at 80%
    assert big == pytest.approx([0.2, 0.8])


def test_max_passes_is_validated() -> None:
    with pytest.raises(ConfigError, match="finetune.max_passes must be null or > 0; got 0"):
        FinetuneConfig(max_passes=0)
