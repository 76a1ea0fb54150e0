"""ACT (Action Chunking with Transformers, CVAE) policy, registered as ``"act"``."""

from rewind.policies.act.configuration_act import ACTConfig
from rewind.policies.act.modeling_act import ACTPolicy
from rewind.policies.registry import register_policy

register_policy("act", ACTConfig, ACTPolicy)

__all__ = ["ACTConfig", "ACTPolicy"]
