"""Rollout engine, bottom half: how a batch of environments is stepped (:func:`rewind.rollout.pool.
step_many` in process; worker processes provide the same call). The monitored lockstep runner that
uses it lives in :mod:`rewind.monitor` (it drives monitored episodes)."""
