"""The subprocess side of the environment workers: build the envs, then serve the parent's commands.

Started by :class:`rewind.rollout.workers.EnvWorkers` (``spawn`` or ``forkserver``), one process per
worker, each holding some envs of the pool. The protocol over the worker's pipe, parent first:

1. the worker builds its envs and sends ``("ok", (layout, observation_space, action_space, metadata,
   render_mode))``; the parent creates the shared block and sends ``("attach", name)``; ``("ok",
   None)``.
2. then, until ``("close", None)`` or the parent's end of the pipe closes:

   * ``("reset", [(index, seed, options), ...])`` -> ``[(info, sync), ...]``
   * ``("step", [(index, action or None), ...])`` -> ``[(reward, terminated, truncated, info, sync)
     or ("rejected", ActionError), ...]`` (``None``: the action is in the env's shared slot)
   * ``("chunk", [(index, actions [T, Da]), ...])`` -> per index the rows of ``step`` for each step
     taken, stopping after the one that ends the episode; an intermediate step's observation comes
     inside its ``sync`` as ``fallback_obs`` (only the last one goes through the shared slot)
   * ``("call", (index, target, name, args, kwargs))`` -> ``(value, sync)``; ``args=None`` asks for
     the attribute itself: ``("method", None)`` when it is callable, else ``("value", value)``.

   Every reply is ``("ok", result)`` or ``("error", (exception, traceback text))``.

``sync`` is ``(order_id, new_order, fallback_obs, elapsed_steps)``: the observation was written to
the env's shared slot with keys in the order registered as ``order_id`` (``new_order`` carries the
key tuple the first time an order is used), or it did not fit the layout and comes as
``fallback_obs``, or there is none (``order_id`` is ``None``). After every command the env's physics
state is in its shared slot, so the parent reads ``physics_state()`` without a round trip.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym

from rewind.envs.core.base import ActionError
from rewind.rollout.slots import SlotLayout, SlotViews

#: (order_id, new_order, fallback_obs, elapsed_steps); see the module doc.
Sync = tuple[int | None, tuple[str, ...] | None, dict[str, Any] | None, int | None]


def serve(conn: Connection, factory: Callable[[], gym.Env], indices: list[int]) -> None:
    """Worker process entry point: build ``factory()`` for each pool index in ``indices``, then serve."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the parent, which closes the pool
    try:
        envs = {g: factory() for g in indices}
        first = envs[indices[0]]
        layout = SlotLayout.for_env(first)
        meta = (first.observation_space, first.action_space, first.metadata, first.render_mode)
        _send(conn, ("ok", (layout, *meta)))
        command, name = conn.recv()
        if command != "attach":
            return
        shm = SharedMemory(name=name)
    except EOFError:
        return
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        _send(conn, ("error", (exc, traceback.format_exc())))
        return
    server = _Server(envs, layout, shm.buf)
    try:
        _send(conn, ("ok", None))
        server.loop(conn)
    finally:
        server.views.clear()
        for env in envs.values():
            env.close()
        shm.close()


class _Server:
    """Holds one worker's envs and their shared slots; one method per command."""

    def __init__(self, envs: dict[int, gym.Env], layout: SlotLayout, buf: memoryview) -> None:
        self.envs, self.layout = envs, layout
        self.views: dict[int, SlotViews] = {g: layout.views(buf, g) for g in envs}
        self.orders: dict[tuple[str, ...], int] = {}

    def loop(self, conn: Connection) -> None:
        """Serve commands until ``close`` or until the parent goes away."""
        handlers = {"reset": self.reset, "step": self.step, "chunk": self.chunk, "call": self.call}
        while True:
            try:
                command, payload = conn.recv()
            except (EOFError, OSError):
                return
            if command == "close":
                return
            try:
                reply = ("ok", handlers[command](payload))
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
                reply = ("error", (exc, traceback.format_exc()))
            _send(conn, reply)

    def reset(self, items: list[tuple[int, int | None, dict | None]]) -> list[tuple[dict, Sync]]:
        """Reset each listed env with its seed and options."""
        out = []
        for g, seed, options in items:
            obs, info = self.envs[g].reset(seed=seed, options=options)
            out.append((info, self.sync(g, obs)))
        return out

    def step(self, items: list[tuple[int, Any]]) -> list[tuple]:
        """Step each listed env (the action from its shared slot when none is sent)."""
        out: list[tuple] = []
        for g, action in items:
            if action is None:
                action = self.views[g].action.copy()  # type: ignore[union-attr]
            out.append(self.step_row(g, action, last=True))
        return out

    def chunk(self, items: list[tuple[int, Any]]) -> list[list[tuple]]:
        """Step each listed env through its actions, until the last or the step that ends the episode."""
        out: list[list[tuple]] = []
        for g, actions in items:
            rows: list[tuple] = []
            for t, action in enumerate(actions):
                rows.append(self.step_row(g, action, last=t == len(actions) - 1))
                if rows[-1][0] == "rejected":
                    self.sync(g, None)  # the physics state of the last step taken, into the slot
                    break
                if rows[-1][1] or rows[-1][2]:
                    break
            out.append(rows)
        return out

    def step_row(self, g: int, action: Any, last: bool) -> tuple:
        """One step of env ``g``: the ``step`` reply row, or ``("rejected", ActionError)``. The state and
        observation go through the slot (:meth:`sync`) on the ``last`` step or one that ends the
        episode; otherwise the observation travels in the row (``fallback_obs``) and the slot is left."""
        env = self.envs[g]
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except ActionError as exc:
            return "rejected", exc
        if last or terminated or truncated:
            sync = self.sync(g, obs)
        else:
            sync = (-1, None, obs, getattr(env.unwrapped, "elapsed_steps", None))
        return reward, terminated, truncated, info, sync

    def call(self, item: tuple[int, str, str, tuple | None, dict | None]) -> tuple[Any, Sync]:
        """Call (or read) ``name`` on the env (``env``), its task (``unwrapped``) or its outermost
        wrapper that has it (``wrapper``)."""
        g, target, name, args, kwargs = item
        env = self.envs[g]
        if target == "wrapper":
            attr = env.get_wrapper_attr(name)
        else:
            attr = getattr(env.unwrapped if target == "unwrapped" else env, name)
        if args is None:
            value = ("method", None) if callable(attr) else ("value", attr)
        else:
            value = attr(*args, **(kwargs or {}))
        return value, self.sync(g, None)

    def sync(self, g: int, obs: Any) -> Sync:
        """Write env ``g``'s physics state (and ``obs``, when it fits) to its slot; describe the rest."""
        env, views = self.envs[g].unwrapped, self.views[g]
        if views.state is not None:
            views.state[...] = env.physics_state()  # type: ignore[attr-defined]
        elapsed = getattr(env, "elapsed_steps", None)
        if obs is None:
            return None, None, None, elapsed
        if not self.layout.write_obs(views, obs):
            return -1, None, obs, elapsed
        order = tuple(obs)
        oid = self.orders.get(order)
        if oid is not None:
            return oid, None, None, elapsed
        oid = self.orders[order] = len(self.orders)
        return oid, order, None, elapsed


def _send(conn: Connection, message: tuple[str, Any]) -> None:
    """Send ``message``; an exception that does not pickle is sent as a ``RuntimeError`` naming it."""
    try:
        conn.send(message)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        if message[0] != "error":
            message = ("error", (exc, traceback.format_exc()))
        original, tb = message[1]
        conn.send(("error", (RuntimeError(f"{type(original).__name__}: {original}"), tb)))
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone: nothing to report to
