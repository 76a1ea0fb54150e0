"""The torch device a command runs on: the one place that knows the valid names and checks them."""

from __future__ import annotations

import torch

from rewind.config import ConfigError, check_choice

#: Valid values of every ``device`` option.
DEVICES = ("auto", "cpu", "cuda", "mps")


def check_device(value: str, key: str = "device") -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of :data:`DEVICES` (for ``__post_init__``)."""
    check_choice(key, value, DEVICES)


def resolve_device(name: str) -> torch.device:
    """``auto``: cuda if available, then mps, then cpu; otherwise the named device (checked)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        return torch.device("mps" if mps is not None and mps.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available (use device=auto or cpu)")
    return torch.device(name)
