"""One source of truth for defaults: every value a YAML file under configs/ sets equals its schema's
default, unless it is a documented override (:data:`OVERRIDES`, each with its reason). A stale entry
(the YAML and the schema agree again, or the key is gone) fails too."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from rewind.collect import CollectConfig
from rewind.config import CommandConfig, to_dataclass
from rewind.envs.config import EnvConfig
from rewind.envs.wrappers import PerturbationConfig
from rewind.eval.config import EvalConfig
from rewind.loop.config import FinetuneConfig, LoopConfig, RecoveryConfig
from rewind.monitor.calibrate import CalibrateConfig
from rewind.monitor.episode import RewindConfig
from rewind.monitor.factory import MonitorConfig
from rewind.monitor.monitor_eval import MonitorEvalConfig
from rewind.policies.registry import get_policy_classes
from rewind.teleop.config import TeleopConfig
from rewind.train import TrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
#: YAML file (relative to configs/) -> the schema whose defaults it restates.
SCHEMAS: dict[str, Any] = {
    "collect.yaml": CollectConfig,
    "eval.yaml": EvalConfig,
    "train.yaml": TrainConfig,
    "calibrate.yaml": CalibrateConfig,
    "monitor_eval.yaml": MonitorEvalConfig,
    "loop.yaml": LoopConfig,
    "teleop.yaml": TeleopConfig,
    "env/*.yaml": EnvConfig,
    "finetune/*.yaml": FinetuneConfig,
    "recovery/*.yaml": RecoveryConfig,
    "monitor/*.yaml": MonitorConfig,
    "rewind/*.yaml": RewindConfig,
    "perturb/*.yaml": PerturbationConfig,
    "policy/*.yaml": None,  # the registry's config class of `name`
}
#: A group file's selector key names the group: it differs from the schema's default by design.
SELECTORS = {
    "env": "name",
    "finetune": "mode",
    "recovery": "name",
    "monitor": "score",
    "rewind": "mode",
    "perturb": "{stem}_prob",
}
#: (file, dotted key) -> why the YAML sets another value than the schema's default. The loop's schema
#: defaults are loop.yaml's (the values behind docs/loop.md's numbers; issue 15 made them agree).
OVERRIDES: dict[tuple[str, str], str] = {
    (
        "eval.yaml",
        "num_threads",
    ): "the command runs small-batch inference on 1 thread (~3x faster than 2 on a "
    "2-core machine); Python callers keep torch's default",
    (
        "train.yaml",
        "train.steps",
    ): "a command-line run trains 5000 steps; the schema's 1000 is a floor for callers",
    ("finetune/fs.yaml", "steps"): "fs retrains from scratch: the base policy's steps",
    ("finetune/fs.yaml", "lr"): "fs retrains from scratch: the base policy's lr",
    ("finetune/fs.yaml", "warmup_steps"): "fs retrains from scratch: the base policy's warm-up",
    ("finetune/fs.yaml", "demo_share"): "fs draws windows uniformly from everything",
    ("recovery/operator.yaml", "max_correction_steps"): "a person gives up on a state beyond recovery",
    ("recovery/operator.yaml", "stall_steps"): "a watching person also intervenes on a stall",
    ("recovery/human.yaml", "max_correction_steps"): "as operator.yaml",
    ("recovery/dagger.yaml", "max_correction_steps"): "as operator.yaml",
    ("recovery/dagger.yaml", "stall_steps"): "as operator.yaml",
    ("recovery/dagger.yaml", "after"): "HG-DAgger hands back to the policy",
    ("recovery/dagger.yaml", "max_interventions"): "HG-DAgger may take over several times",
    ("recovery/retry.yaml", "stall_steps"): "as operator.yaml",
    ("recovery/operator.yaml", "stall_from_demos"): "the stall threshold sized from the demos' stages",
    ("recovery/dagger.yaml", "stall_from_demos"): "as operator.yaml",
    ("recovery/retry.yaml", "stall_from_demos"): "as operator.yaml",
    ("recovery/retry.yaml", "rewind_mode"): "a retry restores (no operator drives back)",
    ("recovery/retry.yaml", "max_interventions"): "several retries per episode",
    ("recovery/retry.yaml", "keep"): "only successful retries are data",
    ("recovery/guided.yaml", "keep"): "only successful guided episodes are data",
    ("policy/diffusion.yaml", "num_inference_steps"): "null resolves to 10 for ddim; the YAML states it",
    ("policy/diffusion.yaml", "ddim_eta"): "new trainings sample with eta 1; weights saved before the "
    "field existed load with the schema's 0, as they were trained",
}


def _schema_default(schema: Any, path: list[str]) -> Any:
    """The default of ``path`` in ``schema`` (a dataclass type or instance); ``KeyError`` if absent."""
    obj = schema() if isinstance(schema, type) else schema
    for key in path:
        if isinstance(obj, dict):
            obj = obj[key]
        elif dataclasses.is_dataclass(obj) and key in {f.name for f in dataclasses.fields(obj)}:
            obj = getattr(obj, key)
        else:
            raise KeyError(".".join(path))
    return obj


def _leaves(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[list[str], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*prefix, str(k)))]
    return [(list(prefix), node)]


#: mandatory values of the command schemas (their defaults are MISSING)
MANDATORY: dict[Any, dict[str, Any]] = {
    TrainConfig: {"data": {"path": "x"}, "policy": {"name": "diffusion"}},
    EvalConfig: {"policy_path": "x"},
    CalibrateConfig: {"policy_path": "x", "data_path": "x"},
    TeleopConfig: {"store": "x"},
    MonitorEvalConfig: {"policy_path": "x", "data_path": "x"},
}


def _instance(schema: Any, data: dict[str, Any]) -> Any:
    """The schema's default instance (a command's mandatory fields filled with placeholders)."""
    if schema is None:
        return get_policy_classes(data["name"])[0]()
    if issubclass(schema, CommandConfig):
        return to_dataclass({"out_dir": "x", **MANDATORY.get(schema, {})}, schema)
    return schema()


def _differences() -> dict[tuple[str, str], tuple[Any, Any]]:
    found = {}
    for pattern, schema in SCHEMAS.items():
        for path in sorted(CONFIGS.glob(pattern)):
            rel = str(path.relative_to(CONFIGS))
            data = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "defaults"}
            inst = _instance(schema, data)
            for keys, value in _leaves(data):
                group = rel.split("/")[0] if "/" in rel else None
                if (schema is None and keys == ["name"]) or (
                    group in SELECTORS and ".".join(keys) == SELECTORS[group].format(stem=path.stem)
                ):
                    continue
                default = _schema_default(inst, keys)
                if isinstance(default, tuple):
                    default = list(default)
                if value != default:
                    found[(rel, ".".join(keys))] = (value, default)
    return found


DIFFERENCES = _differences()


def test_every_yaml_value_equals_its_schema_default_or_is_a_documented_override() -> None:
    undocumented = {k: v for k, v in DIFFERENCES.items() if k not in OVERRIDES}
    assert not undocumented, "\n".join(
        f"{f}: {k} = {v!r} (schema: {d!r})" for (f, k), (v, d) in undocumented.items()
    )


def test_no_stale_override_entries() -> None:
    stale = sorted(set(OVERRIDES) - set(DIFFERENCES))
    assert not stale, f"these overrides agree with the schema now (remove them): {stale}"


@pytest.mark.parametrize("pattern", list(SCHEMAS))
def test_every_config_file_is_covered(pattern: str) -> None:
    assert list(CONFIGS.glob(pattern)), pattern
