#!/usr/bin/env bash
# GPU benchmark: the CPU measurements of bench/bench_policy.py and bench/bench_env.py, on a CUDA machine,
# in under 5 minutes. Writes JSON into ${OUT:-bench/results}/gpu_*.json and prints a short table last.
#   bash bench/gpu.sh                 (from the repository root, with the package installed)
# On the project's lent GPU machine (no network; torch preinstalled), install rewind without deps first:
#   python3 -m pip install -q --no-deps -e . && bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${OUT:-bench/results}"
mkdir -p "$out"
py="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name())"

# Policies: CPU-size U-Net (the default config) and the reference width (methods.md section 5).
timeout 120 "$py" bench/bench_policy.py --device cuda --threads 8 --batch 256 --train-steps 20 --reps 20 \
  --out "$out/gpu_policy.json" >/dev/null
timeout 120 "$py" bench/bench_policy.py --device cuda --threads 8 --batch 256 --train-steps 20 --reps 20 \
  --down-dims 256 512 1024 --out "$out/gpu_policy_reference.json" >/dev/null
# Env stepping is CPU-bound MuJoCo; rendering goes through EGL on the GPU.
MUJOCO_GL=egl timeout 60 "$py" bench/bench_env.py --out "$out/gpu_env.json" >/dev/null || echo "bench_env failed (EGL?)"
# The CUDA-only tests (device move, bf16 autocast).
timeout 60 "$py" -m pytest -q -k cuda tests/policies || true

"$py" - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("gpu_policy.json", "gpu_policy_reference.json"):
    d = json.loads((out / name).read_text())
    print(f"== {name}: {d.get('device')} unet={d.get('unet_overrides')}")
    for p, r in d["training"].items():
        print(f"  train {p:9s} {r['params']/1e6:6.2f}M params  {r['samples_per_s']:9.0f} samples/s")
    for p, r in d["inference"].items():
        print(f"  infer {p:9s} batch1 {r['batch1_ms']:7.2f} ms  batch16 {r['batch16_ms']:7.2f} ms")
PY
