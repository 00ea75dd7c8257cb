"""Scale benchmark of txdilation-analytics: synth N sessions, then analyze them, on local[2].

Runs each step as its own ``python -m txdilation_analytics`` process and samples the resident
memory of the whole process tree (the Python driver plus its JVM) every 0.2 s from /proc, so
"peak memory" is the largest total RSS seen. Prints one line per step and writes
``results.json`` in the work directory.

Usage::

    python benchmarks/analytics_scale.py --sessions 1000000 --driver-memory 4g
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _tree_rss(pid: int) -> int:
    """Total resident bytes of ``pid`` and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        stack.extend(_children(p))
    return total


def run_step(name: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one CLI step, returning its wall time and peak process-tree RSS."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=None, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed with status {proc.returncode}")
    result = {"step": name, "seconds": round(seconds, 1), "peak_rss_mib": peak >> 20}
    print(f"{name}: {seconds:.1f} s, peak RSS {peak >> 20} MiB (driver + JVM)", flush=True)
    result["output"] = json.loads(out) if out.strip() else None
    return result


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def main() -> None:
    """Parse options, run synth then analyze, print and save the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workdir", default=None, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="txdilation-scale-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    base = [sys.executable, "-m", "txdilation_analytics"]
    spark = ["--master", args.master, "--driver-memory", args.driver_memory]
    data, out = os.path.join(work, "data"), os.path.join(work, "out")
    print(f"work directory {work}; {os.cpu_count()} cores", flush=True)
    results = [
        run_step(
            "synth",
            [*base, "synth", "--sessions", str(args.sessions), "--output", data, *spark],
            env,
        )
    ]
    inputs = [
        "--events", os.path.join(data, "events"),
        "--mailbox-usage-db", os.path.join(data, "mailbox-usage.sqlite"),
        "--transit-log", os.path.join(data, "transit.jsonl"),
    ]  # fmt: skip
    results.append(run_step("analyze", [*base, "analyze", *inputs, "--output", out, *spark], env))
    stages = {}
    for layer in ("bronze", "silver", "gold", "report"):
        with open(os.path.join(out, layer, "_stage.json")) as f:
            stages[layer] = json.load(f)["seconds"]
    summary = results[-1].pop("output")
    figures = {
        "sessions": args.sessions,
        "master": args.master,
        "driver_memory": args.driver_memory,
        "cores": os.cpu_count(),
        "steps": results,
        "stage_seconds": stages,
        "events_bytes": _du(os.path.join(data, "events")),
        "output_bytes": _du(out),
        "summary": summary,
    }
    print(json.dumps({k: v for k, v in figures.items() if k != "summary"}, indent=2))
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(figures, f, indent=2)
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
