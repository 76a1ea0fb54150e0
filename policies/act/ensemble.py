"""ACT's temporal ensembling, kept as explicit rollout state so that rewind can restore it.

With ensembling on, the policy predicts a chunk at every control step ``t`` and keeps the executable
part of each (chunk indices ``To-1 .. H-1``, ``L = H - To + 1`` actions for steps ``t .. t+L-1``). The
action for step ``t`` averages the predictions of every pending chunk for ``t``, oldest first, with
weights ``w_i = exp(-m * i)`` normalized to sum to 1 (``i = 0`` the oldest, as in ACT: a small ``m``
averages widely, a large one trusts the oldest prediction most).

The pending chunks live in :attr:`ACTPolicyState.ensemble` (oldest first, newest last, each
``[B, L, Da]``); ``get_state`` / ``set_state`` copy the list, so a rewind restores the exact ensemble,
and ``reset`` clears it, as Rewind-IL does on rewind.

What the monitor sees: :attr:`~rewind.policies.base.ActionChunkPolicy.last_chunks` holds the raw
chunks of the last two steps (``start_step`` one apart), not the ensembled actions; their overlap is
``H - To`` steps, so TIDE compares consecutive raw predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rewind.policies.base import PolicyState


@dataclass
class ACTPolicyState(PolicyState):
    """:class:`PolicyState` plus the pending chunks of the temporal ensemble (oldest first)."""

    ensemble: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def copy_of(cls, state: PolicyState) -> ACTPolicyState:
        """A copy with fresh lists (tensors shared); a plain :class:`PolicyState` gets no ensemble."""
        return cls(
            list(state.obs_history),
            list(state.action_queue),
            list(state.chunks),
            None if state.step is None else state.step.copy(),
            list(getattr(state, "ensemble", [])),
        )


class TemporalEnsembler:
    """Stateless helper: push a chunk onto the pending list and average the current step's predictions.

    Args:
        coeff: ``m`` in ``w_i = exp(-m * i)``; must be >= 0.
        length: ``L``, actions per pending chunk (``H - To + 1``).
    """

    def __init__(self, coeff: float, length: int) -> None:
        """Store ``m`` and ``L``."""
        if coeff < 0:
            raise ValueError(f"temporal_ensemble_coeff must be >= 0; got {coeff}")
        self.coeff, self.length = float(coeff), int(length)

    def push(self, pending: list[torch.Tensor], chunk: torch.Tensor) -> list[torch.Tensor]:
        """New pending list: ``chunk`` ``[B, L, Da]`` appended, chunks older than ``L - 1`` steps dropped."""
        if chunk.shape[1] != self.length:
            raise ValueError(f"chunk has {chunk.shape[1]} executable steps; expected {self.length}")
        return [*pending, chunk][-self.length :]

    def action(self, pending: list[torch.Tensor]) -> torch.Tensor:
        """Ensembled action ``[B, Da]`` for the current step (the newest chunk's index 0).

        The chunk at list position ``j`` of ``n`` was predicted ``n - 1 - j`` steps ago, so its
        prediction for now is its row ``n - 1 - j``.
        """
        if not pending:
            raise ValueError("temporal ensemble is empty; push a chunk first")
        n = len(pending)
        preds = torch.stack([c[:, n - 1 - j] for j, c in enumerate(pending)], dim=0)  # [n, B, Da]
        w = torch.exp(-self.coeff * torch.arange(n, dtype=preds.dtype, device=preds.device))
        return torch.einsum("n,nbd->bd", w / w.sum(), preds)
