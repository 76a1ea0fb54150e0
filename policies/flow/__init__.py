"""Flow-matching policy: ``FlowConfig`` + ``FlowPolicy`` (U-Net from :mod:`rewind.policies.diffusion`)."""

from rewind.policies.flow.configuration_flow import FlowConfig
from rewind.policies.flow.modeling_flow import FlowPolicy

__all__ = ["FlowConfig", "FlowPolicy"]
