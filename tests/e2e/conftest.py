"""End-to-end tests share the train tests' helpers (tiny policies, the 4-demo Lift store)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
