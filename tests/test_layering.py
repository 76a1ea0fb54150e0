"""Package layering, read from the source: every import (module level, inside functions, under
``TYPE_CHECKING``) points down or sideways, never up, and no modules import each other in a circle.

Layers, bottom to top (README, "Layout"):

0. ``rewind`` (the package root), ``rewind.config``, ``rewind.metrics``, ``rewind.utils``, ``rewind.store``
1. ``rewind.envs``, ``rewind.policies``
2. ``rewind.train``, ``rewind.collect`` (operator demos), ``rewind.lockstep`` (batched policy rollouts),
   ``rewind.rollout`` (how a batch of envs is stepped; batched monitored rollouts)
3. ``rewind.monitor``
4. ``rewind.eval``
5. ``rewind.loop``, ``rewind.teleop``
6. ``rewind.cli``, ``rewind.scripts``
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> dotted package it is installed as (pyproject's package-dir)
PACKAGE_DIRS = {
    "rewind": "rewind",
    "envs": "rewind.envs",
    "policies": "rewind.policies",
    "scripts": "rewind.scripts",
}
#: dotted prefix -> layer (the longest matching prefix wins)
LAYERS = {
    "rewind": 0,
    "rewind.config": 0,
    "rewind.metrics": 0,
    "rewind.utils": 0,
    "rewind.store": 0,
    "rewind.envs": 1,
    "rewind.policies": 1,
    "rewind.train": 2,
    "rewind.collect": 2,
    "rewind.lockstep": 2,
    "rewind.rollout": 2,
    "rewind.monitor": 3,
    "rewind.eval": 4,
    "rewind.loop": 5,
    "rewind.teleop": 5,
    "rewind.cli": 6,
    "rewind.scripts": 6,
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the installed package."""
    out = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The first-party modules ``name`` imports anywhere in its file (``from pkg import mod`` counts as
    importing ``pkg.mod`` when that is a module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    """The layer of ``module`` (its longest prefix in :data:`LAYERS`)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise KeyError(module)


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for m in MODULES:
        try:
            layer_of(m)
        except KeyError:
            unplaced.append(m)
    assert not unplaced, f"add these modules to LAYERS: {unplaced}"
    assert len(MODULES) > 100, "the module scan found too little"


def test_no_import_points_upward() -> None:
    upward = [
        f"{m} (layer {layer_of(m)}) imports {dep} (layer {layer_of(dep)})"
        for m, deps in sorted(GRAPH.items())
        for dep in sorted(deps)
        if layer_of(dep) > layer_of(m)
    ]
    assert not upward, "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "modules importing each other in a circle: " + "; ".join(map(str, cycles))


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected


def test_function_level_and_type_checking_imports_are_seen(tmp_path: Path) -> None:
    src = tmp_path / "probe.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rewind.eval import runner\n"
        "def f():\n    from rewind.store.schema import StoreSpec\n    import rewind.loop.report\n"
    )
    assert _imports("rewind.probe", src) == {
        "rewind.eval.runner",
        "rewind.store.schema",
        "rewind.loop.report",
    }
