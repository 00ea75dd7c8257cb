"""Scale benchmark of txdilation-analytics: synth N sessions, analyze them; per-stage figures.

For every ``--sessions N`` (several make a growth table: 1M, 3M, 10M), in one work directory:
``synth`` (skipped when the work directory already has that input), then ``analyze`` as one
``python -m txdilation_analytics`` process on ``--master`` (default local[2]), or with
``--standalone`` submitted by ``spark-submit`` to a standalone master and two workers started
here on 127.0.0.1 (tests/analytics/_cluster.py: one core each, every process stopped at the
end). ``--kill-worker STAGE`` kills one worker (with its executors) when the driver starts that
stage, to measure what losing it costs (compare with a run without).

Per stage, from its ``_stage.json`` (seconds, wall-clock start and end, what it returned):
seconds, rows in and rows/s, and the peak resident memory (RSS) of every process of the run
(the Python driver, its JVM and Python workers; with ``--standalone`` the workers, their
executors too) sampled every 0.5 s from /proc. Rows in: ingest, the lines read (all inputs);
sessionize, the (good) events ordered; aggregate and report, the silver rows (events,
attempts, generations, sessions). The CPU seconds the run's processes used (user + system)
and the 1-minute load average are sampled too: on a shared machine the wall time is partly
other people's, the CPU seconds are not.

Usage::

    nice -n 5 python benchmarks/analytics_scale.py --sessions 1000000 --sessions 3000000 \\
        --driver-memory 6g --compress --workdir /var/tmp/scale --keep
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, "src")
if REPO not in sys.path:
    sys.path.insert(0, REPO)
STAGES = (("bronze", "ingest"), ("silver", "sessionize"), ("gold", "aggregate"),
          ("report", "report"))  # fmt: skip


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``, whichever of its threads started them (a JVM starts
    executors and Python workers from threads other than its main one)."""
    out: list[int] = []
    for children in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(children) as f:
                out.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return out


def process_tree_usage(pids: Sequence[int]) -> tuple[int, float]:
    """Total resident bytes of ``pids`` and all their descendants, and the CPU seconds they
    used (user + system, their reaped children's included)."""
    rss, cpu, stack, seen = 0, 0.0, list(pids), set()
    tick = os.sysconf("SC_CLK_TCK")
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
        stack.extend(_children(p))
    return rss, cpu


class Sampler:
    """Samples (wall time, RSS and CPU seconds of the process trees, 1-minute load) every
    ``period`` s. CPU seconds say what a step cost whatever else the machine was doing."""

    def __init__(self, roots: Sequence[int], period: float = 0.5) -> None:
        self.roots = list(roots)
        self.samples: list[tuple[float, int, float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._period = period

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.is_set():
            rss, cpu = process_tree_usage(self.roots)
            self.samples.append((time.time(), rss, os.getloadavg()[0], cpu))
            self._done.wait(self._period)

    def between(self, start: float, end: float) -> dict[str, Any]:
        """Peak RSS (MiB), CPU seconds and load range of the samples from ``start`` to
        ``end``."""
        inside = [s for s in self.samples if start <= s[0] <= end] or self.samples[-1:]
        before = [s for s in self.samples if s[0] < start]
        cpu_start = before[-1][3] if before else 0.0
        return {
            "peak_rss_mib": max(s[1] for s in inside) >> 20,
            "cpu_s": round(max(s[3] for s in inside) - cpu_start, 1),
            "load": [round(min(s[2] for s in inside), 1), round(max(s[2] for s in inside), 1)],
        }


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))


def _run(argv: list[str], env: dict[str, str], roots: Sequence[int] = (),
         watch: tuple[str, Any] | None = None) -> tuple[int, float, Sampler, str]:  # fmt: skip
    """Run ``argv``; returns (status, seconds, its samples, its output). ``watch``: (text,
    callback) called once when a line of the output contains the text."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    with Sampler([proc.pid, *roots]) as sampler:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            sys.stdout.write("    " + line)
            if watch is not None and watch[0] in line:
                watch[1]()
                watch = None
        status = proc.wait()
    return status, time.monotonic() - start, sampler, "".join(lines)


def synth(n: int, data: str, args: argparse.Namespace) -> dict[str, Any]:
    """Write N sessions under ``data`` unless it holds them already."""
    done = os.path.join(data, "synth.json")
    if os.path.exists(done):
        with open(done) as f:
            return dict(json.load(f), reused=True)
    argv = [sys.executable, "-m", "txdilation_analytics", "synth", "--sessions", str(n),
            "--output", data, "--driver-memory", args.driver_memory, "--no-fast-start"]  # fmt: skip
    if args.compress:
        argv.append("--compress")
    status, seconds, sampler, _ = _run(argv, _env())
    if status:
        raise SystemExit(f"synth failed with status {status}")
    record = {"seconds": round(seconds, 1), **sampler.between(0, time.time())}
    with open(done, "w") as f:
        json.dump(record, f)
    return record


def _inputs(data: str) -> list[str]:
    return ["--events", os.path.join(data, "events"),
            "--mailbox-usage-db", os.path.join(data, "mailbox-usage.sqlite"),
            "--transit-log", os.path.join(data, "transit.jsonl")]  # fmt: skip


def analyze_local(data: str, out: str, args: argparse.Namespace) -> tuple[float, Sampler]:
    """``analyze`` as one local process."""
    argv = [sys.executable, "-m", "txdilation_analytics", "analyze", *_inputs(data),
            "--output", out, "--master", args.master, "--driver-memory", args.driver_memory,
            "--no-fast-start"]  # fmt: skip
    status, seconds, sampler, _ = _run(argv, _env())
    if status:
        raise SystemExit(f"analyze failed with status {status}")
    return seconds, sampler


def analyze_standalone(data: str, out: str, args: argparse.Namespace) -> tuple[float, Sampler]:
    """``analyze`` submitted to a standalone master and two workers started here."""
    from tests.analytics._cluster import StandaloneCluster, driver_env, spark_bin

    root = tempfile.mkdtemp(prefix="txdilation-scale-cluster-")
    cluster = StandaloneCluster(root, workers=2, cores=1, memory=args.worker_memory)
    try:
        cluster.start()
        bundle = os.path.join(root, "txdilation-analytics.zip")
        subprocess.run([sys.executable, "-m", "txdilation_analytics", "bundle", "--output",
                        bundle], env=_env(), check=True)  # fmt: skip
        main = os.path.join(SRC, "txdilation_analytics", "__main__.py")
        argv = [spark_bin("spark-submit"), "--master", cluster.url, "--py-files", bundle,
                "--driver-memory", args.driver_memory,
                "--conf", f"spark.executor.memory={args.executor_memory}",
                "--conf", "spark.executor.cores=1",
                "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                "--conf", "spark.sql.shuffle.partitions=8",
                main, "analyze", *_inputs(data), "--output", out]  # fmt: skip
        env = driver_env(SRC)
        victim = cluster.daemons[2]
        watch = None
        if args.kill_worker:
            watch = (_stage_line(args.kill_worker), lambda: _kill(cluster, victim))
        roots = [d.proc.pid for d in cluster.daemons]
        status, seconds, sampler, _ = _run(argv, env, roots, watch)
        if status:
            raise SystemExit(f"analyze failed with status {status}")
        return seconds, sampler
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _stage_line(stage: str) -> str:
    return {
        "ingest": "ingest events from",
        "sessionize": "sessionize: ordering",
        "aggregate": "aggregate: daily_sessions ...",
        "report": "report: summary ...",
    }[stage]


def _kill(cluster: Any, victim: Any) -> None:
    print(f"    *** killing {victim.name} and its executors at {time.strftime('%X')}", flush=True)
    cluster.kill(victim)


def stage_figures(out: str, sampler: Sampler) -> list[dict[str, Any]]:
    """Per stage: seconds, rows in, rows/s, peak RSS, load (from ``_stage.json``)."""
    records = {}
    for layer, stage in STAGES:
        with open(os.path.join(out, layer, "_stage.json")) as f:
            records[stage] = json.load(f)
    ingest = records["ingest"]["result"]
    silver = records["sessionize"]["result"]
    silver_rows = sum(silver[t] for t in ("events", "attempts", "generations", "sessions"))
    rows_in = {
        "ingest": sum(s["rows"] + s["bad_lines"] for s in ingest.values()),
        "sessionize": silver["events"],
        "aggregate": silver_rows,
        "report": silver_rows,
    }
    out_rows = []
    for stage, record in records.items():
        seconds = record["seconds"]
        out_rows.append(
            {
                "stage": stage,
                "seconds": round(seconds, 1),
                "rows_in": rows_in[stage],
                "rows_per_s": round(rows_in[stage] / seconds) if seconds else None,
                **sampler.between(record["started_at"], record["ended_at"]),
            }
        )
    return out_rows


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def main() -> None:
    """Parse options, run synth then analyze for every size, print and save the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, action="append", help="repeatable (default 1M)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--standalone", action="store_true", help="a local master and 2 workers")
    p.add_argument("--worker-memory", default="8g", help="--standalone: memory per worker")
    p.add_argument("--executor-memory", default="6g", help="--standalone: per executor")
    p.add_argument("--kill-worker", choices=[s for _, s in STAGES], help="--standalone only")
    p.add_argument("--compress", action="store_true", help="synth gzips the event files")
    p.add_argument("--workdir", default=None, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="keep inputs and outputs")
    args = p.parse_args()
    sizes = args.sessions or [1_000_000]
    work = args.workdir or tempfile.mkdtemp(prefix="txdilation-scale-")
    os.makedirs(work, exist_ok=True)
    print(f"work directory {work}; {os.cpu_count()} cores; load {os.getloadavg()}", flush=True)
    results = []
    for n in sizes:
        data = os.path.join(work, f"data-{n}" + ("-gz" if args.compress else ""))
        out = os.path.join(work, f"out-{n}")
        shutil.rmtree(out, ignore_errors=True)
        print(f"== {n:,} sessions: synth", flush=True)
        made = synth(n, data, args)
        print(f"== {n:,} sessions: analyze", flush=True)
        run = analyze_standalone if args.standalone else analyze_local
        seconds, sampler = run(data, out, args)
        stages = stage_figures(out, sampler)
        results.append(
            {
                "sessions": n,
                "mode": "standalone (2 workers x 1 core)" if args.standalone else args.master,
                "killed_worker_at": args.kill_worker,
                "synth": made,
                "analyze_seconds": round(seconds, 1),
                "analyze": sampler.between(0, time.time()),
                "stages": stages,
                "events_bytes": _du(os.path.join(data, "events")),
                "output_bytes": _du(out),
            }
        )
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    print(
        "\n  sessions  mode        stage        seconds  CPU s      rows in     rows/s"
        "  peak RSS  load"
    )
    for r in results:
        whole = {"stage": "analyze", "seconds": r["analyze_seconds"], **r["analyze"]}
        for s in [*r["stages"], whole]:
            rows = (
                f"{s['rows_in']:>12,} {s['rows_per_s'] or 0:>10,}" if "rows_in" in s else " " * 23
            )
            print(
                f"{r['sessions']:>10,}  {r['mode'][:10]:<10}  {s['stage']:<10} {s['seconds']:>8}"
                f" {s['cpu_s']:>6} {rows}  {s['peak_rss_mib']:>5} MiB"
                f"  {s['load'][0]}-{s['load'][1]}"
            )
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nfigures: {os.path.join(work, 'results.json')}")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
