"""Crash-safe, append-only replay store of robot episodes (HDF5 files + SQLite index).

Public API::

    from rewind.store import ReplayStore, StoreSpec, SOURCES, StoreError, store_info, verify_store

See ``docs/store.md`` for the on-disk layout and the commit protocol.
"""

from rewind.store.info import format_store_info, store_info
from rewind.store.schema import (
    SCHEMA_VERSION,
    SOURCE_CODES,
    SOURCES,
    Episode,
    EpisodeInfo,
    StoreError,
    StoreSpec,
    store_spec_for,
)
from rewind.store.store import ReplayStore
from rewind.store.verify import verify_store
from rewind.store.writer import EpisodeWriter

__all__ = [
    "SCHEMA_VERSION",
    "SOURCES",
    "SOURCE_CODES",
    "Episode",
    "EpisodeInfo",
    "EpisodeWriter",
    "ReplayStore",
    "StoreError",
    "StoreSpec",
    "format_store_info",
    "store_info",
    "store_spec_for",
    "verify_store",
]
