"""Every repository path and dotted ``rewind.…`` name the README and ``docs/*.md`` mention exists.

Checked, in backticks:

* paths under the repository's folders (``rewind/eval/runner.py``, ``configs/monitor/*.yaml``,
  ``bench/results/loop_experiment_<task>.json``): ``*`` and ``<placeholder>`` match any name,
  ``{a,b}`` each alternative, ``tests/x.py::test_name`` the test function too;
* bare file names in a table row or sentence (``runner.py``) against the folder the text is about:
  the last path before them on the same line, else the last folder named since the section's heading
  (``Code: `rewind/monitor/```);
* dotted names (``rewind.monitor.episode.MonitoredEpisode``): the module, and the name defined in it;
  also in the ``configs/`` YAML comments (``# Fields: rewind.….Config``).

What is not a repository path is listed in ``NOT_PATHS`` with the reason.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: first path component of a repository path
PATH_ROOTS = ("rewind", "envs", "policies", "configs", "scripts", "bench", "tests", "docs", ".ci")
#: dotted package -> source folder (pyproject's package-dir)
PACKAGE_DIRS = {
    "rewind.envs": "envs",
    "rewind.policies": "policies",
    "rewind.scripts": "scripts",
    "rewind.configs": "configs",
}
#: backticked words under PATH_ROOTS that are not repository paths, and why
NOT_PATHS = {
    r"rewind/[A-Za-z0-9-]+-v\d+": "a Gymnasium env id (rewind/Lift-v0), not a file",
}

_TICKS = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(rf"^(?:{'|'.join(re.escape(r) for r in PATH_ROOTS)})/\S*$")
_BARE_FILE = re.compile(r"^[A-Za-z0-9_*]+\.py$")
_DOTTED = re.compile(r"\brewind(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _expand(path: str) -> list[str]:
    """Glob patterns for ``path``: ``<x>`` -> ``*``, ``{a,b}`` -> one pattern per alternative."""
    path = re.sub(r"<[^>]+>", "*", path)
    parts = re.split(r"\{([^}]*)\}", path)
    options = [p.split(",") if i % 2 else [p] for i, p in enumerate(parts)]
    return ["".join(choice) for choice in itertools.product(*options)]


def path_problem(path: str, base: Path = ROOT) -> str | None:
    """Why ``path`` (relative to ``base``) names nothing in the repository, or None."""
    path, _, test = path.partition("::")
    for pattern in _expand(path.rstrip("/")):
        matches = list(base.glob(pattern)) if "*" in pattern else [base / pattern]
        if not any(m.exists() for m in matches):
            return f"{base.relative_to(ROOT) / pattern} does not exist"
        if test and not re.search(rf"^def {re.escape(test)}\(", matches[0].read_text(), re.M):
            return f"{pattern} has no test {test}"
    return None


@functools.cache
def _defined_names(file: Path) -> frozenset[str]:
    """Names bound at the top level of a module (classes, functions, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def dotted_problem(name: str) -> str | None:
    """Why the dotted ``rewind.…`` name does not resolve to a module (and a name defined in it), or None.

    A name whose first part after ``rewind.`` is no module (``rewind.max_rewinds``) is a config key of
    the ``rewind`` group, not checked."""
    parts = name.split(".")
    prefix = next((p for p in PACKAGE_DIRS if name == p or name.startswith(p + ".")), "rewind")
    here = ROOT / PACKAGE_DIRS.get(prefix, "rewind")
    rest = parts[len(prefix.split(".")) :]
    if prefix == "rewind" and not ((here / rest[0]).is_dir() or (here / f"{rest[0]}.py").is_file()):
        return None
    while rest and (here / rest[0]).is_dir():
        here = here / rest.pop(0)
    if rest and (here / f"{rest[0]}.py").is_file():
        here = here / f"{rest.pop(0)}.py"
    module = here / "__init__.py" if here.is_dir() else here
    if rest and rest[0] not in _defined_names(module):
        return f"{name}: {module.relative_to(ROOT)} defines no {rest[0]}"
    return None


def _not_a_path(word: str) -> bool:
    return any(re.fullmatch(pattern, word) for pattern in NOT_PATHS)


def doc_problems(text: str, doc: str = "doc") -> list[str]:
    """Every path, bare file name and dotted name in ``text`` (markdown) that names nothing."""
    problems = []
    folder: Path | None = None  # the folder the current section is about
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            folder = None
        line_base: Path | None = None
        for word in _TICKS.findall(line):
            where = f"{doc}:{number}: `{word}`"
            for dotted in _DOTTED.findall(word):
                if (problem := dotted_problem(dotted)) is not None:
                    problems.append(f"{where}: {problem}")
            path = word.split()[0] if word.split() else word
            if _PATH.match(path) and not _not_a_path(path):
                if (problem := path_problem(path)) is not None:
                    problems.append(f"{where}: {problem}")
                    continue
                target = ROOT / path.partition("::")[0]
                line_base = target if path.endswith("/") else target.parent
                if path.endswith("/"):
                    folder = target
            elif _BARE_FILE.match(word) and (base := line_base or folder) is not None:
                if (problem := path_problem(word, base)) is not None:
                    problems.append(f"{where}: {problem}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_paths_named_in_docs_exist(doc: Path) -> None:
    problems = doc_problems(doc.read_text(), doc.name)
    assert not problems, "\n".join(problems)


def test_dotted_names_in_config_comments_exist() -> None:
    problems = []
    for yaml in sorted((ROOT / "configs").rglob("*.yaml")):
        for number, line in enumerate(yaml.read_text().splitlines(), 1):
            for dotted in _DOTTED.findall(line.partition("#")[2]):
                if (problem := dotted_problem(dotted)) is not None:
                    problems.append(f"{yaml.relative_to(ROOT)}:{number}: {problem}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "text",
    [
        "see `rewind/monitor/runner.py`",  # a file that is gone
        "| a | `configs/monitor/nothing_*.yaml` |",  # a glob matching nothing
        "`tests/test_layering.py::test_no_such_test`",  # a test that is gone
        # a bare name in the folder the section is about
        "Code: `rewind/teleop/`.\n\n| `loop.py` | the simulation thread |",
        "`rewind/eval/` (`runner.py`, `recorders.py`)",  # a bare name after a path on the line
        "`rewind.monitor.setup.load_monitor`",  # a module that is gone
        "`rewind.monitor.episode.NoSuchThing`",  # a name the module does not define
        "`rewind.envs.operators.human_like.NoSuchThing`",  # under a package-dir package
        "`rewind.loop.stages.no_such_function`",
    ],
)
def test_a_stale_name_is_reported(text: str) -> None:
    assert doc_problems(text)


def test_existing_names_pass() -> None:
    text = (
        "Code: `rewind/monitor/`.\n| `episode.py`, `factory.py` |\n"
        "`rewind/eval/` (`runner.py`, `observers.py`), `configs/env/*.yaml`\n"
        "`bench/results/operators_<task>.json`, `rewind.monitor.episode.MonitoredEpisode`\n"
        "`rewind.envs.wrappers.PerturbationConfig`, `rewind/Lift-v0`\n"
        "`rewind.store.SCHEMA_VERSION`, `tests/test_doc_paths.py::test_existing_names_pass`\n"
        "`rewind.max_rewinds` (a config key), `calibration.json` (an output file), `rewind.configs`"
    )
    assert doc_problems(text) == []
