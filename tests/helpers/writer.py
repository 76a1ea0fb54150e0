"""Writer subprocess for the crash and concurrency tests.

Usage (from tests/): python -m helpers.writer STORE_PATH MAX_EPISODES [SLEEP_S]

Opens (or creates) the store for appending, prints ``ready``, then appends ``make_episode(i)``
for ``i = len(store) ..`` until the store holds MAX_EPISODES, printing ``committed <i>`` after
each commit (flushed, so the parent knows which commits returned). Episode ``i`` is the store's
``i``-th episode; its id is ``i`` unless an earlier writer was killed between renaming a file and
committing its row (that id is then never reused), so readers match ``info.extra["index"]``.
"""

from __future__ import annotations

import sys
import time

from helpers.store import make_episode, make_spec
from rewind.store import ReplayStore


def main() -> None:
    path, max_episodes = sys.argv[1], int(sys.argv[2])
    sleep_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    store = ReplayStore.open_or_create(path, make_spec(image=True))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while len(store) < max_episodes:
        i = len(store)
        info = store.add_episode(**make_episode(i, image=True))
        assert info.id >= i and info.extra["index"] == i
        sys.stdout.write(f"committed {i}\n")
        sys.stdout.flush()
        if sleep_s:
            time.sleep(sleep_s)
    store.close()


if __name__ == "__main__":
    main()
