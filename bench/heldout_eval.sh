#!/usr/bin/env bash
# Evaluate loop policies on held-out seeds that no loop, tuning or selection step uses (90000..).
#   bash bench/heldout_eval.sh OUT_JSON EPISODES NAME=WEIGHTS [NAME=WEIGHTS ...]
# Each policy: `rewind-eval policy_path=WEIGHTS env=pick_place episodes=EPISODES seed=90000`;
# OUT_JSON collects each run's summary.json under its NAME.
set -euo pipefail
out=$1; episodes=$2; shift 2
root=runs/heldout_eval
bin=${REWIND_BIN:-.venv/bin}
mkdir -p "$root"
for spec in "$@"; do
  name=${spec%%=*}; weights=${spec#*=}
  "$bin/rewind-eval" policy_path="$weights" env=pick_place episodes="$episodes" seed=90000 \
    out_dir="$root/$name" >"$root/$name.log" 2>&1 || { echo "rewind-eval failed for $name: $root/$name.log" >&2; exit 1; }
done
python3 - "$out" "$root" "$@" <<'PY'
import json, sys
out, root, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
res = {}
for spec in specs:
    name, weights = spec.split("=", 1)
    s = json.load(open(f"{root}/{name}/summary.json"))
    res[name] = {"weights": weights, "summary": s}
json.dump({"seed": 90000, "results": res}, open(out, "w"), indent=1)
print(json.dumps({k: v["summary"].get("success_rate") for k, v in res.items()}))
PY
