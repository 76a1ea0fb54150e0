"""Helpers shared by the tests (importable as ``helpers``: pyproject sets pytest's pythonpath to tests/)."""
