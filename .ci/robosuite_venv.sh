#!/usr/bin/env bash
# Build (or refresh) the virtualenv of the optional extra rewind[robosuite] at .venv-robosuite.
#   bash .ci/robosuite_venv.sh            (VENV=path to build elsewhere; PYTHON picks the interpreter)
# robosuite 1.5.2 pins mink==0.0.5 (forcing numpy < 2) and its controllers break on mujoco >= 3.10,
# so it never goes into the base .venv. Only what rewind.envs.robosuite and tests/robosuite import is
# installed: rewind itself without its dependencies (no torch), robosuite without its own (no mink,
# qpsolvers, pynput: robosuite imports them optionally or never on this path), then the extra's pins
# from pyproject.toml plus gymnasium, h5py (datasets, the store) and pytest.
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
EXTRA=$("$VENV/bin/python" - <<'PY'
import tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["robosuite"]
print(" ".join(extra))
PY
)
# shellcheck disable=SC2086  # the extra's requirements, one word each
robosuite_req=$(printf '%s\n' $EXTRA | grep '^robosuite')
pip_q --no-deps "$robosuite_req"
# shellcheck disable=SC2086
pip_q $(printf '%s\n' $EXTRA | grep -v '^robosuite') "gymnasium>=1.0" "h5py>=3.9" "pytest>=8"
pip_q --no-deps -e .
"$VENV/bin/python" -c "import robosuite, mujoco, numpy; from rewind.envs.robosuite.compat import require_robosuite; require_robosuite(); print(f'robosuite {robosuite.__version__}, mujoco {mujoco.__version__}, numpy {numpy.__version__}')" 2>/dev/null
