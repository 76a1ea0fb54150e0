"""Batched monitored rollouts: ``B`` monitored episodes stepped together, one batched inference for the
episodes due for a chunk.

Each env of the batch runs one :class:`~rewind.monitor.episode.MonitoredEpisode` at a time with its own
rollout state (the policy's history, queue and chunks, swapped in around every policy call), its own
score state (:meth:`~rewind.monitor.scores.FailureScore.for_episode`), checkpoint tracking
(:meth:`~rewind.monitor.checkpoints.CheckpointTracker.for_episode`) and noise stream seeded by
``(gen_seed, episode seed)``. A tick:

1. free envs start the next seeds (an episode that ends never stalls the others);
2. every episode in a ``drive`` rewind takes its next drive step; every policy episode observes and
   either pops its queue or waits for a chunk;
3. when no policy episode can act without a chunk, the waiting ones are inferred together;
4. every episode with an action steps, all through one ``step_many`` call
   (:func:`rewind.rollout.pool.step_many`, or worker processes'), then the monitor, the tracker and
   rewinds (``restore`` at once, ``drive`` over the next ticks) follow as in the sequential episode.

**Equality.** Batched CPU inference is not bit-identical across batch shapes (a row computed alone and
inside 8 rows differ at ~1e-5), so every inference runs in blocks of exactly ``inference_rows`` rows
(padded with copies of the first): a row's result then depends only on its own window and noise
stream, not on which or how many episodes share the block or where it sits (measured bit-for-bit on
CPU, 1 and 2 threads). Records, events, score traces and stored episodes are therefore identical for
any batch size ``B`` (B = 1 is the sequential runner) and any worker layout; ``inference_rows``
itself is part of the result (``0``: unpadded blocks, faster for B = 1, equal only at float precision).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from rewind.monitor.checkpoints import CheckpointTracker
from rewind.monitor.episode import Monitor, MonitoredEpisode, RewindConfig
from rewind.monitor.steps import PendingStep, RewindPlan, StepResult
from rewind.policies.base import ActionChunkPolicy, Obs, PolicyState
from rewind.policies.noise import NoiseStream, RowGenerators
from rewind.rollout.pool import StepOutcome, step_many
from rewind.utils.seeding import episode_noise_seed, torch_generator

#: ``step_many(envs, indices, actions)``: how a batch's envs are stepped (in process or in workers).
StepMany = Callable[[Sequence[gym.Env], Sequence[int], Sequence[np.ndarray]], list[StepOutcome]]
#: Rows of every batched inference by default (results depend on it at float precision; see above).
DEFAULT_INFERENCE_ROWS = 10


@dataclass
class EpisodeSlot:
    """One env of the batch and the episode it runs now.

    Attributes:
        index: env index in the batch; ep: its monitored episode; order: the episode's position in
        the seed list (``-1``: free); state: the policy's rollout state of this episode.
        window: the observation window waiting for a chunk; action: the action of this tick.
        plan: a ``drive`` rewind under way; pending: what the step keeps from before its action.
    """

    index: int
    ep: MonitoredEpisode
    order: int = -1
    state: PolicyState = field(default_factory=PolicyState)
    window: Obs | None = None
    action: np.ndarray | None = None
    plan: RewindPlan | None = None
    pending: PendingStep | None = None

    @property
    def busy(self) -> bool:
        """An episode is running on this env."""
        return self.order >= 0


class BatchedMonitoredRunner:
    """Runs monitored episodes on ``envs`` in lockstep (see the module docstring).

    Args:
        envs: the batch's envs (in-process envs or worker proxies); ``B = len(envs)``.
        policy: the action-chunk policy (shared; each episode's rollout state is swapped in).
        monitor: score + calibration (``None``: no scores); its score is copied per episode.
        tracker: checkpoint tracker (``None``: only the episode start); copied per episode.
        rewind: rewind settings; device: policy device; gen_seed: the run's noise seed.
        inference_rows: rows of every batched inference (``0``: unpadded).
        step: how the envs are stepped (``step_many``).
        noise_seed: episode seed -> seed of its noise stream (default
            :func:`~rewind.utils.seeding.episode_noise_seed` of ``gen_seed``).
    """

    def __init__(
        self,
        envs: Sequence[gym.Env],
        policy: ActionChunkPolicy,
        monitor: Monitor | None,
        tracker: CheckpointTracker | None,
        rewind: RewindConfig,
        device: torch.device,
        gen_seed: int,
        inference_rows: int = DEFAULT_INFERENCE_ROWS,
        step: StepMany = step_many,
        noise_seed: Callable[[int], int] | None = None,
    ) -> None:
        if not envs:
            raise ValueError("a batched rollout needs at least one env")
        if inference_rows < 0:
            raise ValueError(f"inference_rows must be >= 0; got {inference_rows}")
        self.envs, self.policy, self.monitor, self.tracker = envs, policy, monitor, tracker
        self.device, self.gen_seed, self.rows, self.step = device, int(gen_seed), int(inference_rows), step
        self.slots = [
            EpisodeSlot(i, MonitoredEpisode(env, policy, None, tracker, rewind, device))
            for i, env in enumerate(envs)
        ]
        self._pad_stream = NoiseStream(torch_generator(0, "cpu"))
        self.noise_seed = noise_seed or (lambda seed: episode_noise_seed(self.gen_seed, seed))
        #: ``on_start(slot, seed)`` after each episode's reset; ``on_end(slot)`` when it is over.
        self.on_start: Callable[[EpisodeSlot, int], None] | None = None
        self.on_end: Callable[[EpisodeSlot], None] | None = None
        #: ``on_policy_step(slot, res)`` after each policy step is observed (the slot's rollout state
        #: in the policy; it may act on the episode through its API); ``True`` ends the episode now.
        self.on_policy_step: Callable[[EpisodeSlot, StepResult], bool] | None = None

    # ----------------------------------------------------------------- the loop
    def run(self, seeds: Sequence[int]) -> None:
        """Run every seed; ``on_end`` sees each episode when it ends (in completion order)."""
        queue = list(enumerate(seeds))[::-1]
        try:
            while True:
                for slot in self.slots:
                    if not slot.busy and queue:
                        self._start(slot, *queue.pop())
                active = [s for s in self.slots if s.busy]
                if not active:
                    return
                self._tick(active)
        finally:
            self.policy.reset()

    def _tick(self, active: list[EpisodeSlot]) -> None:
        """One lockstep step of every active episode that has (or now gets) an action."""
        for slot in active:
            self._prepare(slot)
        waiting = [s for s in active if s.window is not None]
        if waiting and not any(s.plan is None and s.action is not None for s in active):
            self._infer(waiting)
        moving = [s for s in active if s.action is not None]
        for slot in moving:
            slot.pending = slot.ep.before_step()
        outcomes = self.step(self.envs, [s.index for s in moving], [s.action for s in moving])
        for slot, outcome in zip(moving, outcomes, strict=True):
            self._after(slot, outcome)

    @contextlib.contextmanager
    def _policy_of(self, slot: EpisodeSlot) -> Iterator[None]:
        """The policy holds ``slot``'s rollout state inside the block (and gives it back after)."""
        self.policy.set_state(slot.state)
        try:
            yield
        finally:
            slot.state = self.policy.get_state()

    def _start(self, slot: EpisodeSlot, order: int, seed: int) -> None:
        ep = slot.ep
        if self.monitor is not None:
            ep.monitor = Monitor(
                self.monitor.score.for_episode(seed),
                self.monitor.calibration,
                self.monitor.progress,
                self.monitor.armed_from,
                self.monitor.segments,
            )
        ep.tracker = self.tracker.for_episode() if self.tracker is not None else None
        ep.noise = NoiseStream(torch_generator(self.noise_seed(seed), self.device))
        slot.order, slot.state, slot.window, slot.action, slot.plan = order, PolicyState(), None, None, None
        with self._policy_of(slot):
            ep.reset(int(seed))
        if self.on_start is not None:
            self.on_start(slot, int(seed))

    # ----------------------------------------------------------------- one tick
    def _prepare(self, slot: EpisodeSlot) -> None:
        """Give ``slot`` its action of this tick, or leave it waiting for a chunk."""
        if slot.action is not None or slot.window is not None:
            return
        if slot.plan is not None:
            slot.action = slot.ep.drive_action(slot.plan)
            if slot.action is not None:
                return
            self._end_rewind(slot)
            if slot.ep.done:  # the drive ended the episode
                self._finish(slot)
                return
        with self._policy_of(slot):
            window = self.policy.observe(slot.ep.policy_obs())
            if window is None:
                slot.action = self._next_action()
        slot.window = window

    def _next_action(self) -> np.ndarray:
        return self.policy.next_action()[0].float().cpu().numpy()

    def _infer(self, waiting: list[EpisodeSlot]) -> None:
        """One batched inference (per block of ``inference_rows``) for the episodes due for a chunk."""
        size = self.rows or len(waiting)
        ns = waiting[0].ep.num_samples
        for first in range(0, len(waiting), size):
            group = waiting[first : first + size]
            windows = [s.window for s in group if s.window is not None]
            streams = [s.ep.noise for s in group if s.ep.noise is not None]
            pad = size - len(group)
            batch = {k: torch.cat([w[k] for w in windows] + [windows[0][k]] * pad) for k in windows[0]}
            rows = RowGenerators(streams + [self._pad_stream] * pad)
            samples = self.policy.predict_chunk(batch, ns, rows)  # type: ignore[arg-type]
            for row, slot in enumerate(group):
                with self._policy_of(slot):
                    self.policy.accept_chunk(samples[row : row + 1])
                    slot.action = self._next_action()
                slot.window = None

    def _after(self, slot: EpisodeSlot, outcome: StepOutcome) -> None:
        """The env stepped ``slot``'s action: monitor, tracker, rewinds, end of the episode."""
        ep, action, before = slot.ep, slot.action, slot.pending
        assert action is not None and before is not None
        slot.action, slot.pending = None, None
        if slot.plan is not None:
            ep.drive_step_done(slot.plan, ep.after_step(before, action, "recovery", outcome))
            return
        res: StepResult = ep.after_step(before, action, "policy", outcome)
        ended = False
        with self._policy_of(slot):
            ep.observe_policy_step(res)
            if ep.wants_rewind(res):
                plan = ep.begin_rewind()
                if plan.mode == "drive":
                    slot.plan = plan
                else:
                    ep.end_rewind(plan)
            if self.on_policy_step is not None:
                ended = self.on_policy_step(slot, res)
        if ended or (ep.done and slot.plan is None):
            self._finish(slot)

    def _end_rewind(self, slot: EpisodeSlot) -> None:
        assert slot.plan is not None
        with self._policy_of(slot):
            slot.ep.end_rewind(slot.plan)
        slot.plan = None

    def _finish(self, slot: EpisodeSlot) -> None:
        if self.on_end is not None:
            self.on_end(slot)
        slot.order = -1
