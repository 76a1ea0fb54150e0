"""Teleop benchmark: camera frame rate and key-to-frame latency, measured from an HTTP client.

``rewind-teleop`` runs as its own process (20 Hz control, 256x256 JPEG frames); this script is the
client, reading the MJPEG stream like the page does:

* ``human.fps``: frames per second received while a movement key is held (pure teleop: every
  control step is a person's step, rendered and streamed);
* ``latency_ms``: time from sending a key press (``POST /api/input``) to receiving the first frame
  rendered after a human step that applied it (the frame's ``X-Input-Seq`` part header >= the
  press's sequence number and ``X-Source: human``), over ``--presses`` presses at random phases of
  the control tick;
* ``policy.fps`` (with ``--policy-path``): frames per second while the policy drives (its
  inference included), over the stretches of consecutive policy steps of several episodes.

Targets: >= 20 frames/s at 256x256, key-to-frame <= 100 ms on localhost. Run::

    MUJOCO_GL=osmesa .venv/bin/python bench/bench_teleop.py --out bench/results/teleop.json \\
        --policy-path runs/base_policies/lift_d100_s2500/train
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from rewind.utils.io import atomic_write_text

log = logging.getLogger("bench_teleop")

TARGET_FPS, TARGET_LATENCY_MS = 20.0, 100.0


class StreamReader:
    """Reads ``/stream.mjpg`` in a thread; keeps ``(arrival time, part headers)`` of every frame."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=30)
        self.frames: list[tuple[float, dict[str, str]]] = []
        self.cond = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StreamReader:
        self.thread.start()
        return self

    def _run(self) -> None:
        self.conn.request("GET", "/stream.mjpg")
        resp = self.conn.getresponse()
        while not self.stop:
            line = resp.fp.readline()
            if not line:
                return
            if not line.startswith(b"--"):
                continue
            headers: dict[str, str] = {}
            while (h := resp.fp.readline().strip()) != b"":
                k, v = h.decode().split(":", 1)
                headers[k.strip().lower()] = v.strip()
            if "content-length" not in headers:  # the stream ended after a part's closing boundary
                return
            resp.fp.read(int(headers["content-length"]))
            with self.cond:
                self.frames.append((time.perf_counter(), headers))
                self.cond.notify_all()

    def wait_for(self, pred: Any, after: int, timeout: float = 5.0) -> tuple[int, float] | None:
        """Index and arrival time of the first frame at index >= ``after`` whose headers satisfy ``pred``."""
        deadline = time.perf_counter() + timeout
        with self.cond:
            i = after
            while True:
                while i < len(self.frames):
                    if pred(self.frames[i][1]):
                        return i, self.frames[i][0]
                    i += 1
                left = deadline - time.perf_counter()
                if left <= 0:
                    return None
                self.cond.wait(left)


def post(host: str, port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out


def start_server(
    out: Path, store: Path, policy_path: str | None, extra: list[str]
) -> tuple[subprocess.Popen, str, int]:
    """``rewind-teleop`` on a free port (pure teleop, or the policy without a monitor)."""
    args = [
        sys.executable,
        "-m",
        "rewind.scripts.teleop",
        "env=lift",
        f"store={store}",
        "port=0",
        f"out_dir={out}",
        "view.image_size=256",
        "control_hz=20",
        "num_threads=1",
        "env.max_steps=100000",
    ]
    args += [f"policy_path={policy_path}"] if policy_path else []
    args += extra
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "server.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"rewind-teleop did not start ({' '.join(args)})")
        time.sleep(0.2)
    info = json.loads((out / "server.json").read_text())
    return proc, "127.0.0.1", int(info["port"])


def measure_human(host: str, port: int, presses: int, hold_s: float, seed: int) -> dict[str, Any]:
    """Frame rate with a key held, then key-to-frame latency of ``presses`` separate presses."""
    reader = StreamReader(host, port).start()
    time.sleep(1.0)
    start, n0, keys = time.perf_counter(), len(reader.frames), ["KeyD", "KeyA"]
    while time.perf_counter() - start < hold_s:  # hold a key (refreshed like the page does), alternate sides
        post(host, port, "/api/input", {"keys": [keys[int((time.perf_counter() - start) // 1.0) % 2]]})
        time.sleep(0.1)
    times = [t for t, h in reader.frames[n0:] if h["x-source"] == "human"]
    post(host, port, "/api/input", {"keys": []})
    rng = np.random.default_rng(seed)
    latencies = []
    for _ in range(presses):
        time.sleep(0.25 + float(rng.uniform(0.0, 0.1)))  # random phase against the 50 ms tick
        after = len(reader.frames)
        t0 = time.perf_counter()
        seq = post(host, port, "/api/input", {"keys": ["KeyW" if len(latencies) % 2 else "KeyS"]})["seq"]
        hit = reader.wait_for(lambda h, s=seq: int(h["x-input-seq"]) >= s and h["x-source"] == "human", after)
        post(host, port, "/api/input", {"keys": []})
        if hit is not None:
            latencies.append((hit[1] - t0) * 1000.0)
    reader.stop = True
    return {**frame_rate(times), "latency_ms": summarize(latencies, presses)}


def measure_policy(host: str, port: int, seconds: float) -> dict[str, Any]:
    """Frame rate while the policy drives: episodes are discarded as soon as they end (Lift succeeds
    in about a second) and only the stretches of consecutive policy frames are timed."""
    reader = StreamReader(host, port).start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(0.05)
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("GET", "/api/state")
        if json.loads(conn.getresponse().read())["episode"]["done"]:
            post(host, port, "/api/command", {"cmd": "discard"})
        conn.close()
    reader.stop = True
    runs: list[list[float]] = [[]]
    last_step = -1
    for t, h in reader.frames:
        step = int(h["x-step"])
        if h["x-source"] != "policy" or step <= last_step:
            runs.append([])
        if h["x-source"] == "policy":
            runs[-1].append(t)
        last_step = step
    rates = [frame_rate(r) for r in runs if len(r) > 1]
    frames, span = sum(r["frames"] - 1 for r in rates), sum(r["seconds"] for r in rates)
    return {
        "fps": round(frames / span, 2) if span else 0.0,
        "frames": frames + len(rates),
        "seconds": round(span, 3),
        "episodes": len(rates),
    }


def frame_rate(times: list[float]) -> dict[str, Any]:
    """Frames per second between the first and the last of the arrival ``times``."""
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {
        "fps": round((len(times) - 1) / span, 2) if span else 0.0,
        "frames": len(times),
        "seconds": round(span, 3),
    }


def summarize(ms: list[float], tried: int) -> dict[str, Any]:
    """Mean, median, p95 and max of the latencies (ms)."""
    if not ms:
        return {"n": 0, "tried": tried}
    return {
        "n": len(ms),
        "tried": tried,
        "mean": round(statistics.fmean(ms), 2),
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p95": round(float(np.percentile(ms, 95)), 2),
        "max": round(max(ms), 2),
    }


def one_repeat(args: argparse.Namespace, tmp: Path, rep: int) -> dict[str, Any]:
    """Both measurements once, each against its own server process."""
    out: dict[str, Any] = {"loadavg_1min": round(os.getloadavg()[0], 2)}
    proc, host, port = start_server(tmp / f"human{rep}", tmp / f"store_h{rep}", None, args.set)
    try:
        out["human"] = measure_human(host, port, args.presses, args.hold_s, args.seed + rep)
    finally:
        proc.terminate()
        proc.wait(30)
    if args.policy_path:
        proc, host, port = start_server(
            tmp / f"policy{rep}", tmp / f"store_p{rep}", args.policy_path, args.set
        )
        try:
            out["policy"] = measure_policy(host, port, args.policy_s)
        finally:
            proc.terminate()
            proc.wait(30)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``--repeats`` repeats and their medians (the machine's load varies from one to the next)."""
    result: dict[str, Any] = {
        "command": " ".join(["bench/bench_teleop.py", *sys.argv[1:]]),
        "image_size": 256,
        "control_hz": 20,
        "policy_path": args.policy_path,
        "overrides": args.set,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_repeat(args, Path(tmp), rep) for rep in range(args.repeats)]
    med = lambda xs: round(float(np.median(xs)), 2)  # noqa: E731
    lat = [r["human"]["latency_ms"] for r in runs]
    result["median"] = {
        "human_fps": med([r["human"]["fps"] for r in runs]),
        "policy_fps": med([r["policy"]["fps"] for r in runs]) if args.policy_path else None,
        "latency_ms": {k: med([x[k] for x in lat]) for k in ("mean", "p50", "p95", "max")},
        "loadavg_1min": med([r["loadavg_1min"] for r in runs]),
    }
    m = result["median"]
    fps = [m["human_fps"]] + ([m["policy_fps"]] if args.policy_path else [])
    result["targets"] = {"fps": TARGET_FPS, "latency_ms": TARGET_LATENCY_MS}
    result["meets_targets"] = {
        "fps": min(fps) >= TARGET_FPS * 0.98,
        "latency_p95": m["latency_ms"]["p95"] <= TARGET_LATENCY_MS,
    }
    result["runs"] = runs
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the results JSON here")
    p.add_argument(
        "--policy-path", help="also measure the frame rate while this policy drives (Lift weights)"
    )
    p.add_argument("--presses", type=int, default=60, help="key presses timed for the latency")
    p.add_argument("--hold-s", type=float, default=6.0, help="seconds a key is held for the frame rate")
    p.add_argument("--policy-s", type=float, default=8.0, help="seconds of policy driving timed")
    p.add_argument("--seed", type=int, default=0, help="seed of the press timing")
    p.add_argument("--repeats", type=int, default=3, help="repeats (medians are reported)")
    p.add_argument(
        "--set", action="append", default=[], help="extra rewind-teleop override (view.shadows=true)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args)
    text = json.dumps(result, indent=1)
    log.info(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
