"""What ``txdilation exec`` costs at start-up: ``python benchmarks/exec_startup.py``.

Layer: benchmark. Runs, alternately and ``--runs`` times each (after one warm-up of each),
``python -c pass`` and ``txdilation exec python -c pass`` (the same interpreter: this one, or
``--python``), and prints their wall-clock medians side by side with the difference, which the
target bounds (at most 150 ms more; the exec path imports neither Twisted nor wormhole), and
the machine's load average. ``--with-wormhole`` times ``python -c "import wormhole"`` the same
way: there the difference is txdilation's install against stock's own import. ``--json``
prints one JSON line instead of the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0


def txdilation_command(python: str) -> list[str]:
    """The ``txdilation`` console script beside ``python``, else ``python -m txdilation``."""
    script = os.path.join(os.path.dirname(python), "txdilation")
    return [script] if os.access(script, os.X_OK) else [python, "-m", "txdilation"]


def wall_ms(argv: list[str]) -> float:
    """One run of ``argv`` to its end, in milliseconds (it must exit 0)."""
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000.0


def measure(python: str, code: str, runs: int) -> dict[str, float]:
    """Medians (ms) of ``python -c CODE`` and of the same under ``txdilation exec``."""
    plain = [python, "-c", code]
    under = [*txdilation_command(python), "exec", *plain]
    wall_ms(plain), wall_ms(under)  # warm the page cache and the .pyc files
    times: dict[str, list[float]] = {"plain": [], "exec": []}
    for _ in range(runs):
        times["plain"].append(wall_ms(plain))
        times["exec"].append(wall_ms(under))
    plain_ms, exec_ms = statistics.median(times["plain"]), statistics.median(times["exec"])
    return {"plain_ms": plain_ms, "exec_ms": exec_ms, "extra_ms": exec_ms - plain_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each (default 30)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (this one)")
    parser.add_argument("--with-wormhole", action="store_true", help="also import wormhole")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    cases = {"python -c pass": "pass"}
    if args.with_wormhole:
        cases['python -c "import wormhole"'] = "import wormhole"
    load = os.getloadavg()
    figures = {name: measure(args.python, code, args.runs) for name, code in cases.items()}
    if args.json:
        print(json.dumps({"load": load, "runs": args.runs, "target_ms": TARGET_MS, **figures}))
        return 0
    print(f"txdilation exec start-up, median of {args.runs} runs each, alternating")
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'command':32} {'plain ms':>9} {'exec ms':>9} {'extra ms':>9}")
    for name, f in figures.items():
        print(f"{name:32} {f['plain_ms']:9.1f} {f['exec_ms']:9.1f} {f['extra_ms']:9.1f}")
    extra = figures["python -c pass"]["extra_ms"]
    verdict = "met" if extra <= TARGET_MS else "NOT MET"
    print(f"target: at most {TARGET_MS:.0f} ms more than python -c pass: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
