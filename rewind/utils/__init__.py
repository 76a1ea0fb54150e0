"""Small, dependency-light helpers shared across rewind (I/O, seeding, logging, run provenance)."""
