"""A/B two versions of txdilation on one figure: ``python -m benchmarks.ab --base DIR``.

Layer: benchmark infrastructure (for measuring one change; no stock here). ``DIR`` is another
checkout of this repository (e.g. ``git worktree add /tmp/base HEAD~1``): version A runs
txdilation from ``DIR/src``, version B from this checkout, alternately (A, B, A, B, ...), each
peer in its own process through one real mailbox server, exactly as ``benchmarks/run.py``
runs its figures: ``--figure bulk`` (same peers, same payload, receiver SHA-256 checked) or
``--figure gap`` (the reconnection gap). Prints each run with the machine's other load, then the
median of each version and the median of the per-pair B/A ratios: for bulk, throughput, CPU
seconds of each peer and peak RSS; for gap, the median and worst gap.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.run import (  # noqa: E402
    BenchmarkError,
    MiB,
    Session,
    _bulk_trial,
    _gap_trial,
    child_environment,
    start_mailbox,
)

KEYS = {
    "bulk": (
        ("mbps", "MB/s"),
        ("recv_cpu", "receiver CPU s"),
        ("send_cpu", "sender CPU s"),
        ("recv_rss", "receiver peak RSS MiB"),
        ("send_rss", "sender peak RSS MiB"),
    ),
    "gap": (("gap_ms", "gap ms (median of 5 aborts)"), ("gap_max_ms", "worst gap ms")),
}


def main(argv: list[str] | None = None) -> int:
    """Run the A/B; returns 0 (1 when a run failed)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="checkout of version A (B is this one)")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--mib", type=int, default=256, help="MiB per transfer")
    p.add_argument("--chunk", type=int, default=64 << 10, help="bytes per write")
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    p.add_argument("--figure", choices=sorted(KEYS), default="bulk")
    args = p.parse_args(argv)
    env_b = child_environment()
    env_a = dict(env_b)
    env_a["PYTHONPATH"] = os.pathsep.join([str(Path(args.base) / "src"), env_b["PYTHONPATH"]])
    mailbox, url = start_mailbox(env_b)
    session = Session(url, mailbox.pid, args.timeout, None, env_b)
    trial = _bulk_trial(args.mib * MiB, args.chunk) if args.figure == "bulk" else _gap_trial
    keys = KEYS[args.figure]
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    try:
        for index in range(args.pairs):
            for version, env in (("A", env_a), ("B", env_b)):
                session.env = env
                result = trial(session, "txdilation", index + 1)  # index 0 would profile
                runs[version].append(result)
                values = ", ".join(f"{title} {result[key]:.3f}" for key, title in keys)
                print(
                    f"#{index + 1} {version}: {values} (load {result['loadavg1']:.1f}, "
                    f"other CPU {result['other_cores']:.2f} cores)",
                    flush=True,
                )
    except BenchmarkError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        assert mailbox.stdin is not None
        mailbox.stdin.close()
        mailbox.wait(timeout=30)
    what = f"{args.mib} MiB in {args.chunk}-byte writes" if args.figure == "bulk" else "gap"
    print(f"\n{args.pairs} pairs, {what}, A = {args.base}")
    print("| figure | A | B | B/A (median of pairs) |\n|---|---:|---:|---:|")
    for key, title in keys:
        a = [r[key] for r in runs["A"]]
        b = [r[key] for r in runs["B"]]
        ratio = statistics.median(y / x for x, y in zip(a, b, strict=True) if x > 0)
        print(
            f"| {title} | {statistics.median(a):.3f} | {statistics.median(b):.3f} | {ratio:.3f} |"
        )
    others = [r["other_cores"] for v in runs.values() for r in v]
    print(f"other processes: {statistics.median(others):.2f} cores (median), max {max(others):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
