"""The training metrics between two log lines, kept on the device (no host sync per step)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


class MetricWindow:
    """Running sums of the training metrics between two log lines, and the first step whose loss or
    gradient norm was non-finite (kept on the device: no host sync per step)."""

    def __init__(self, step: int, device: torch.device) -> None:
        self.device = device
        self.loss_sum = torch.zeros((), device=device)
        self.grad_sum = torch.zeros((), device=device)
        self.n = 0
        self.last_loss: float | None = None
        self.start_step, self.start_time = step, time.perf_counter()
        self.bad_loss = torch.full((), -1, dtype=torch.long, device=device)
        self.bad_grad = torch.full((), -1, dtype=torch.long, device=device)

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor, step: int) -> None:
        """Accumulate step ``step`` on the device (no host sync until :meth:`flush`)."""
        grad_norm = grad_norm.to(self.device)
        self.loss_sum = self.loss_sum + loss
        self.grad_sum = self.grad_sum + grad_norm
        self.n += 1
        self.bad_loss = torch.where((self.bad_loss < 0) & ~torch.isfinite(loss), step, self.bad_loss)
        self.bad_grad = torch.where((self.bad_grad < 0) & ~torch.isfinite(grad_norm), step, self.bad_grad)

    def check_finite(self, error: Callable[[str, int], Exception]) -> None:
        """Raise ``error(what, step)`` when a loss or gradient norm added so far was non-finite."""
        bad_loss, bad_grad = int(self.bad_loss), int(self.bad_grad)
        if bad_loss >= 0 and (bad_grad < 0 or bad_loss <= bad_grad):
            raise error("loss", bad_loss)
        if bad_grad >= 0:
            raise error("gradient norm", bad_grad)

    def flush(self, step: int, batch_size: int, lr: float) -> dict[str, float]:
        """The window's mean loss and gradient norm, the lr and the throughput; then start a new window."""
        now = time.perf_counter()
        self.last_loss = float(self.loss_sum) / max(self.n, 1)
        record = {
            "train/loss": self.last_loss,
            "train/grad_norm": float(self.grad_sum) / max(self.n, 1),
            "train/lr": float(lr),
            "train/samples_per_s": (step - self.start_step) * batch_size / max(now - self.start_time, 1e-9),
        }
        self.loss_sum, self.grad_sum, self.n = (
            torch.zeros_like(self.loss_sum),
            torch.zeros_like(self.grad_sum),
            0,
        )
        self.start_step, self.start_time = step, now
        return record
