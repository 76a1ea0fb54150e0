"""Diffusion Policy: ``DiffusionConfig`` + ``DiffusionPolicy`` (and the shared ``ConditionalUnet1D``)."""

from rewind.policies.diffusion.configuration_diffusion import DiffusionConfig
from rewind.policies.diffusion.modeling_diffusion import DiffusionPolicy
from rewind.policies.diffusion.unet import ConditionalUnet1D

__all__ = ["ConditionalUnet1D", "DiffusionConfig", "DiffusionPolicy"]
