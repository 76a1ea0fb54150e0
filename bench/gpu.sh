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

# Training end to end with rewind-train: one GPU, then DDP over every visible GPU (torchrun, NCCL) with the
# same global batch; steps/s from metrics.jsonl. bench/ddp_cpu.py does the measuring (it collects a
# 4-demo Lift store itself); the multi-GPU run happens only when more than one GPU is visible.
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
timeout 240 "$py" bench/ddp_cpu.py --device cuda --processes 1 $([ "$ngpu" -gt 1 ] && echo "$ngpu") \
  --batches 256 --steps 200 --out "$out/gpu_ddp.json" >/dev/null || echo "gpu_ddp failed"

"$py" - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
ddp = out / "gpu_ddp.json"
if ddp.exists():
    for r in json.loads(ddp.read_text())["runs"]:
        print(f"== rewind-train {r['processes']} GPU process(es), global batch {r['global_batch']}: "
              f"{r['steps_per_s']:.1f} steps/s {r.get('speedup_vs_1', '')}")
for name in ("gpu_policy.json", "gpu_policy_reference.json"):
    d = json.loads((out / name).read_text())
    print(f"== {name}: {d.get('device')} unet={d.get('unet_overrides')}")
    for p, r in d["training"].items():
        print(f"  train {p:9s} {r['params']/1e6:6.2f}M params  {r['samples_per_s']:9.0f} samples/s")
    for p, r in d["inference"].items():
        print(f"  infer {p:9s} batch1 {r['batch1_ms']:7.2f} ms  batch16 {r['batch16_ms']:7.2f} ms")
PY
