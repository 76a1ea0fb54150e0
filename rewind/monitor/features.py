"""Per-control-step encoder features for checkpoint tracking, cheap enough for every step.

``policy.encode`` checks and normalizes every key with separate torch calls (about 0.6 ms for one
low-dim window on this CPU). Tracking needs the same features at every control step, so
:class:`FeatureExtractor` compiles a low-dim ``flatten`` encoder (normalizer affine per key, then the
MLP) into a few numpy operations on the raw observation window (tens of microseconds). Encoders it
cannot compile (images, other layer types) fall back to ``policy.encode``. Both paths give the same
features (tested to float32 precision).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import torch
from torch import nn

from rewind.policies.base import ActionChunkPolicy
from rewind.policies.encoders import LowDimEncoder


def _mish(x: np.ndarray) -> np.ndarray:
    return x * np.tanh(np.logaddexp(0.0, x))


def _compile_layers(net: nn.Module) -> list[tuple[str, Any]] | None:
    """The MLP as (kind, numpy params) steps, or ``None`` when a layer is not supported."""
    steps: list[tuple[str, Any]] = []
    for layer in net.children() if isinstance(net, nn.Sequential) else [net]:
        if isinstance(layer, nn.Linear):
            b = layer.bias.detach().numpy() if layer.bias is not None else 0.0
            steps.append(("linear", (layer.weight.detach().numpy().T.copy(), b)))
        elif isinstance(layer, nn.LayerNorm) and len(layer.normalized_shape) == 1:
            w = layer.weight.detach().numpy() if layer.weight is not None else 1.0
            b = layer.bias.detach().numpy() if layer.bias is not None else 0.0
            steps.append(("layernorm", (w, b, layer.eps)))
        elif isinstance(layer, (nn.Mish, nn.ReLU, nn.SiLU, nn.Identity)):
            steps.append((type(layer).__name__.lower(), None))
        else:
            return None
    return steps


class FeatureExtractor:
    """Encoder features ``[F]`` of the policy's observation window, one observation at a time.

    Call :meth:`reset` at the start of an episode (and after a rewind), then :meth:`push` each new
    observation (the one the policy acts on) and read :meth:`features`.
    """

    def __init__(self, policy: ActionChunkPolicy) -> None:
        self.policy = policy
        self.to = policy.n_obs_steps
        self._hist: deque[dict[str, np.ndarray]] = deque(maxlen=self.to)
        self._fast = self._compile(policy)

    @property
    def compiled(self) -> bool:
        """The numpy fast path is in use."""
        return self._fast is not None

    def _compile(self, policy: ActionChunkPolicy) -> dict[str, Any] | None:
        enc = getattr(policy, "obs_encoder", None)
        norm = getattr(policy, "normalizer", None)
        if not isinstance(enc, LowDimEncoder) or enc.mode != "flatten" or norm is None:
            return None
        layers = _compile_layers(enc.net)
        if layers is None:
            return None
        affine = []
        for k in enc.keys:
            key, mode = f"obs/{k}", norm.modes.get(f"obs/{k}")
            if mode == "identity":
                affine.append((k, None, None))
            elif mode in ("min_max", "mean_std") and key in norm.stats:
                st = norm.stats[key]
                affine.append((k, st.loc.detach().numpy().copy(), st.scale.detach().numpy().copy()))
            else:
                return None
        return {"affine": affine, "layers": layers, "clip": norm.obs_clip}

    def reset(self) -> None:
        """Forget the window (episode start, rewind)."""
        self._hist.clear()

    def push(self, obs: dict[str, np.ndarray]) -> None:
        """Add the observation the policy acts on next (its share of the first layer is computed here)."""
        f = self._fast
        if f is None:
            self._hist.append(obs)
            return
        parts, clip = [], f["clip"]
        for k, loc, scale in f["affine"]:
            v = np.asarray(obs[k], dtype=np.float32).ravel()
            if loc is not None:
                v = (v - loc) / scale
                if clip is not None:
                    v = np.clip(v, -clip, clip)
            parts.append(v)
        self._hist.append(np.concatenate(parts))

    def features(self) -> np.ndarray:
        """``[F]`` features of the current window (the first observation repeated at episode start)."""
        hist = list(self._hist)
        if not hist:
            raise ValueError("FeatureExtractor.features() before any push()")
        hist = [hist[0]] * (self.to - len(hist)) + hist
        if self._fast is None:
            window = {k: torch.as_tensor(np.stack([h[k] for h in hist]))[None].float() for k in hist[0]}
            with torch.no_grad():
                return self.policy.encode(window)[0].float().numpy()
        x = np.concatenate(hist)
        for kind, p in self._fast["layers"]:
            if kind == "linear":
                x = x @ p[0] + p[1]
            elif kind == "layernorm":
                d = x - x.mean()
                x = d / math.sqrt(float(d @ d) / d.size + p[2]) * p[0] + p[1]
            elif kind == "mish":
                x = _mish(x)
            elif kind == "relu":
                x = np.maximum(x, 0.0)
            elif kind == "silu":
                x = x / (1.0 + np.exp(-x))
        return x.astype(np.float32, copy=False)
