"""Packaging: one import root. Every package folder is listed in pyproject, nothing generic is installed."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _package_folders() -> dict[str, Path]:
    """Dotted package name -> folder, for every folder with an __init__.py under a package-dir root."""
    found = {}
    for package, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if ".venv" in rel.parts or "__pycache__" in rel.parts:
                continue
            found[".".join([package, *rel.parts])] = init.parent
    return found


def test_every_package_folder_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    missing = sorted(set(_package_folders()) - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_every_listed_package_exists() -> None:
    stale = sorted(set(SETUPTOOLS["packages"]) - set(_package_folders()))
    assert not stale, f"listed in pyproject.toml but no folder with __init__.py: {stale}"


def test_generic_top_level_names_are_not_importable(tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u, json; "
        "print(json.dumps({n: u.find_spec(n) is not None for n in "
        "['envs', 'policies', 'scripts', 'configs', 'rewind', 'rewind.envs', 'rewind.policies']}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60
    )
    found = json.loads(proc.stdout)
    assert found == {
        "envs": False,
        "policies": False,
        "scripts": False,
        "configs": False,
        "rewind": True,
        "rewind.envs": True,
        "rewind.policies": True,
    }


def test_command_configs_extend_their_schema() -> None:
    """configs/<name>.yaml of a command lists `<name>_schema` in its defaults (see rewind/cli/app.py)."""
    configs = resources.files("rewind.configs")
    yamls = [p for p in configs.iterdir() if p.name.endswith(".yaml")]
    assert any(p.name == "store.yaml" for p in yamls)
    for path in yamls:
        stem = path.name.removesuffix(".yaml")
        defaults = yaml.safe_load(path.read_text()).get("defaults", [])
        assert f"{stem}_schema" in defaults, f"{path.name}: add '- {stem}_schema' before '- _self_'"


def test_console_scripts_resolve() -> None:
    """Every [project.scripts] entry names a module with a top-level ``main`` (checked without importing)."""
    import ast
    from importlib.util import find_spec

    for name, target in PYPROJECT["project"]["scripts"].items():
        module, _, attr = target.partition(":")
        spec = find_spec(module)
        assert spec is not None and spec.origin, f"{name}: module {module} not found"
        tree = ast.parse(Path(spec.origin).read_text())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert attr in defined, f"{name}: {module} defines no top-level function {attr}"
