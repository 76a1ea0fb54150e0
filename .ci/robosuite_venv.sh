#!/usr/bin/env bash
# Build (or refresh) the virtualenv of the optional extra rewind[robosuite] at .venv-robosuite.
#   bash .ci/robosuite_venv.sh            (VENV=path to build elsewhere; PYTHON picks the interpreter)
# robosuite 1.5.2 pins mink==0.0.5 (forcing numpy < 2) and its controllers break on mujoco >= 3.10,
# so it never goes into the base .venv. Installed: robosuite without its own dependencies (no mink,
# qpsolvers, pynput: robosuite imports them optionally or never on this path), the extra's pins from
# pyproject.toml, rewind's own dependencies under those pins (torch, Hydra, diffusers, wandb...: the
# CLIs train, evaluate and run the loop on the robosuite envs; robomimic, needed by no rewind module,
# is left out), pytest, then rewind itself, editable and without dependencies.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${VENV:-.venv-robosuite}"
PYTHON="${PYTHON:-python3}"
pip_q() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" </dev/null 2>&1 \
  | { grep -v -e "is ignored: it is neither a file nor a directory" -e "dependency resolver" \
      -e "requires .*, which is not installed" || true; }; }

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
read_reqs() {  # $1: "extra" (the robosuite extra) or "base" (rewind's own dependencies)
  "$VENV/bin/python" - "$1" <<'PY'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
if sys.argv[1] == "extra":
    print(" ".join(project["optional-dependencies"]["robosuite"]))
else:  # the extra pins numpy and mujoco; torch is installed on its own; robomimic is not needed
    skip = {"numpy", "mujoco", "torch", "robomimic"}
    print(" ".join(r for r in project["dependencies"] if re.split(r"[<>=!~ \[]", r)[0] not in skip))
PY
}
EXTRA=$(read_reqs extra)
BASE=$(read_reqs base)
# shellcheck disable=SC2086  # the extra's requirements, one word each
robosuite_req=$(printf '%s\n' $EXTRA | grep '^robosuite')
pip_q --no-deps "$robosuite_req"
# shellcheck disable=SC2086
pins=$(printf '%s\n' $EXTRA | grep -v '^robosuite')
# torch: the CPU build when pip can find one (~0.2 GB instead of ~4 GB with the CUDA libraries),
# otherwise pip's default build. Always together with the extra's pins (numpy < 2).
# shellcheck disable=SC2086
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check $pins "torch==2.13.0+cpu" </dev/null >/dev/null 2>&1; then
  pip_q $pins torch
fi
# shellcheck disable=SC2086
pip_q $pins $BASE "pytest>=8"
pip_q --no-deps -e .
"$VENV/bin/python" -c "import robosuite, mujoco, numpy, torch; from rewind.envs.robosuite.compat import require_robosuite; require_robosuite(); print(f'robosuite {robosuite.__version__}, mujoco {mujoco.__version__}, numpy {numpy.__version__}, torch {torch.__version__}')" 2>/dev/null
