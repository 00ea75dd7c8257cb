"""Stock Dilation vs txdilation, side by side: ``python benchmarks/run.py [--quick]``.

Layer: benchmark infrastructure. One real mailbox server runs in its own process on
127.0.0.1 (``benchmarks.mailbox``); every peer runs in its own process (``benchmarks.peer``),
stock confined to 127.0.0.1 by ``tests.support.harness.stock_loopback()`` and txdilation installed
as the drop-in and confined by ``TXDILATION_LISTEN_INTERFACE``/``TXDILATION_HINT_ADDRESSES``. For
each figure the two implementations run alternately (stock, txdilation, stock, txdilation,
...); the table shows the median of each and the median of the per-pair txdilation/stock
ratios. Raw Twisted TCP and one core's crypto are measured in the same session, and for every
run the machine's other load is recorded: the 1-minute load average and the CPU seconds spent
by processes other than this benchmark's own during the run (from /proc/stat).

``--quick`` runs only a small bulk transfer (the CI regression guard); ``--json PATH`` writes
every measurement; ``--only`` picks figures; ``--profile DIR`` also writes one cProfile of each
bulk peer per implementation.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.peer import expected_digest  # noqa: E402
from txdilation.link.connection import TCP_BUFFER_SIZE  # noqa: E402

IMPLS = ("stock", "txdilation")
#: forced dilation sides: the receiving/serving peer ("left") leads
LEFT_SIDE = "f000000000000000"
RIGHT_SIDE = "0000000000000001"
MiB = 1 << 20


def child_environment() -> dict[str, str]:
    """This process's environment plus ``src`` and the repo root on PYTHONPATH, loopback only."""
    env = dict(os.environ)
    paths = [str(REPO_ROOT / "src"), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env["TXDILATION_LISTEN_INTERFACE"] = "127.0.0.1"
    env["TXDILATION_HINT_ADDRESSES"] = "127.0.0.1"
    return env


class BenchmarkError(RuntimeError):
    """A peer failed, timed out or reported something wrong."""


# ---------------------------------------------------------------------------------------------
# load on the machine


def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return user + nice + system + irq + softirq + steal


def _process_jiffies(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class LoadProbe:
    """Measures the rest of the machine's CPU use while one run happens.

    ``other_cpu``: CPU seconds used by every process except this one, its (waited-for)
    children and the mailbox server; ``other_cores``: the same divided by the wall time (how
    many cores the rest of the machine kept busy on average).
    """

    def __init__(self, extra_pids: Sequence[int]) -> None:
        self._pids = list(extra_pids)
        self._hz = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> LoadProbe:
        with open("/proc/loadavg") as f:
            self.loadavg = float(f.read().split()[0])
        self._wall = time.monotonic()
        self._busy = _busy_jiffies()
        self._own = _own_cpu()
        self._extra = sum(_process_jiffies(p) for p in self._pids)
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._wall
        busy = (_busy_jiffies() - self._busy) / self._hz
        own = _own_cpu() - self._own
        extra = (sum(_process_jiffies(p) for p in self._pids) - self._extra) / self._hz
        self.other_cpu = max(0.0, busy - own - extra)
        self.other_cores = self.other_cpu / wall if wall > 0 else 0.0
        self.wall = wall

    def as_dict(self) -> dict[str, float]:
        return {
            "loadavg1": self.loadavg,
            "other_cpu_s": round(self.other_cpu, 2),
            "other_cores": round(self.other_cores, 2),
            "wall_s": round(self.wall, 2),
        }


# ---------------------------------------------------------------------------------------------
# processes


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return {}


@dataclass
class Session:
    """What every run shares: the mailbox server, the environment, the time limit."""

    mailbox_url: str
    mailbox_pid: int
    timeout: float
    profile_dir: Path | None = None
    env: dict[str, str] = field(default_factory=child_environment)
    #: the module each peer runs (``python -m``): its roles and options
    peer_module: str = "benchmarks.peer"
    _nameplate: int = 100

    def code(self) -> str:
        """A fresh code (a numeric nameplate no other run used, then a random word)."""
        self._nameplate += 1
        return f"{self._nameplate}-{secrets.token_hex(4)}"

    def nameplate_block(self, size: int) -> int:
        """Reserve ``size`` consecutive fresh nameplates; returns the one before the first."""
        base = self._nameplate
        self._nameplate += size
        return base

    def peer_args(
        self, impl: str, role: str, side: str, code: str, extra: Sequence[str]
    ) -> list[str]:
        return [
            sys.executable, "-m", self.peer_module, "--impl", impl, "--role", role,
            "--mailbox", self.mailbox_url, "--code", code, "--side", side,
            "--timeout", str(self.timeout), *extra,
        ]  # fmt: skip

    def run_pair(
        self,
        impl: str,
        left: tuple[str, Sequence[str]],
        right: tuple[str, Sequence[str]],
        *,
        code: str | None = None,
        profile: str | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
        """Run two peers at once; ``left`` (leader) gets stdin EOF once ``right`` exited.

        :returns: the left and right ``result`` events and the load during the run.
        :raises BenchmarkError: when either fails or times out.
        """
        code = code or self.code()
        procs = []
        errs = []
        with LoadProbe([self.mailbox_pid]) as probe:
            for name, (role, extra), side in (
                ("left", left, LEFT_SIDE),
                ("right", right, RIGHT_SIDE),
            ):
                extra = list(extra)
                if profile and self.profile_dir is not None:
                    extra += ["--profile", str(self.profile_dir / f"{impl}-{profile}-{name}.prof")]
                err = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, or with the process)
                errs.append(err)
                procs.append(
                    subprocess.Popen(
                        self.peer_args(impl, role, side, code, extra),
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                        env=self.env, cwd=str(REPO_ROOT),
                    )
                )  # fmt: skip
            deadline = time.monotonic() + self.timeout + 10
            try:
                right_out = procs[1].communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
                left_out = procs[0].communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                    p.wait()
                raise BenchmarkError(f"{impl} {left[0]}/{right[0]} timed out") from None
        results = []
        outs = (left_out, right_out)
        for name, proc, out, err in zip(("left", "right"), procs, outs, errs, strict=True):
            result = _last_json(out.decode("utf-8", "replace"))
            if proc.returncode != 0 or result.get("event") != "result":
                err.seek(0)
                tail = err.read()[-3000:].decode("utf-8", "replace")
                raise BenchmarkError(
                    f"{impl} {name} peer failed (exit {proc.returncode}): {result}\n{tail}"
                )
            err.close()
            results.append(result)
        return results[0], results[1], probe.as_dict()

    def run_raw_tcp(self, total: int, chunk: int, buffer: int = 0) -> dict[str, Any]:
        """Raw Twisted TCP between two processes (``buffer``: the transports' read, buffer and
        send size, 0 for Twisted's defaults); returns MB/s, the receiver's CPU and the load."""
        base = [sys.executable, "-m", "benchmarks.limits"]
        with LoadProbe([self.mailbox_pid]) as probe:
            sink = subprocess.Popen(
                [*base, "tcp-sink", "--total", str(total), "--hash", "--buffer", str(buffer)],
                stdout=subprocess.PIPE, env=self.env, cwd=str(REPO_ROOT), text=True,
            )  # fmt: skip
            assert sink.stdout is not None
            port = json.loads(sink.stdout.readline())["port"]
            source = subprocess.run(
                [*base, "tcp-source", "--total", str(total), "--chunk", str(chunk),
                 "--port", str(port), "--buffer", str(buffer)],
                capture_output=True, env=self.env, cwd=str(REPO_ROOT), text=True,
                timeout=self.timeout,
            )  # fmt: skip
            received = _last_json(sink.communicate(timeout=self.timeout)[0])
        sent = _last_json(source.stdout)
        if not received or not sent:
            raise BenchmarkError(f"raw TCP run failed: {source.stderr[-2000:]}")
        mbps = total / (received["last"] - sent["started"]) / 1e6
        return {"mbps": mbps, "recv_cpu": received["transfer_cpu"], **probe.as_dict()}

    def run_crypto(self) -> dict[str, Any]:
        """One core's crypto rates (MB per CPU-second)."""
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.limits", "crypto"],
            capture_output=True, env=self.env, cwd=str(REPO_ROOT), text=True,
            timeout=self.timeout, check=True,
        ).stdout  # fmt: skip
        return _last_json(out)


def start_mailbox(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start ``benchmarks.mailbox``; returns the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.mailbox"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(REPO_ROOT), text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise BenchmarkError("the mailbox server did not start")
    return proc, json.loads(line)["url"]


# ---------------------------------------------------------------------------------------------
# figures


@dataclass(frozen=True)
class Row:
    """One line of the table: a metric of a figure's trials."""

    key: str
    title: str
    unit: str
    higher_is_better: bool
    goal: float | None = None  # txdilation/stock ratio that meets the target (None: report)
    digits: int = 0


@dataclass(frozen=True)
class Figure:
    """A kind of run, repeated alternately for both implementations."""

    name: str
    rows: tuple[Row, ...]
    trial: Callable[[Session, str, int], dict[str, float]]
    pairs: int


@functools.cache
def _expected_digest(total: int, chunk: int) -> str:
    return expected_digest("txdilation-bench", total, chunk)


def _bulk_trial(total: int, chunk: int, hashing: bool = True) -> Callable[..., dict[str, float]]:
    def trial(session: Session, impl: str, index: int) -> dict[str, float]:
        extra = ["--total", str(total), "--chunk", str(chunk)]
        recv_extra = extra + ([] if hashing else ["--no-hash"])
        profile = f"bulk{chunk}" if index == 0 else None  # the first pair only
        left, right, load = session.run_pair(
            impl, ("bulk-recv", recv_extra), ("bulk-send", extra), profile=profile
        )
        if hashing and left["sha256"] != _expected_digest(total, chunk):
            raise BenchmarkError(f"{impl}: the received stream's SHA-256 differs")
        seconds = left["last"] - right["started"]
        return {
            "mbps": total / seconds / 1e6,
            "recv_cpu": left["transfer_cpu"],
            "send_cpu": right["transfer_cpu"],
            "cpu": left["transfer_cpu"] + right["transfer_cpu"],
            "recv_rss": left["maxrss_mib"],
            "send_rss": right["maxrss_mib"],
            "dilate_ms": _dilate_ms(left, right),
            **load,
        }

    return trial


def _dilate_ms(left: dict[str, Any], right: dict[str, Any]) -> float:
    """From the later create() (both peers exist) to the later when_dilated(), in ms."""
    created = max(left["created"], right["created"])
    return (max(left["dilated"], right["dilated"]) - created) * 1000


def _keyed_ms(left: dict[str, Any], right: dict[str, Any]) -> float:
    """From the later end of the key exchange to the later when_dilated(), in ms."""
    keyed = max(left["keyed"], right["keyed"])
    return (max(left["dilated"], right["dilated"]) - keyed) * 1000


def _dilate_trial(session: Session, impl: str, index: int) -> dict[str, float]:
    left, right, load = session.run_pair(
        impl, ("echo-server", []), ("echo-client", ["--count", "1"])
    )
    return {"dilate_ms": _dilate_ms(left, right), "keyed_ms": _keyed_ms(left, right), **load}


GAP_CUTS = 5


def _gap_trial(session: Session, impl: str, index: int) -> dict[str, float]:
    left, _right, load = session.run_pair(
        impl, ("gap-recv", ["--cuts", str(GAP_CUTS)]), ("gap-send", [])
    )
    gaps = left["gaps"]
    if len(gaps) != GAP_CUTS:
        raise BenchmarkError(f"{impl}: expected {GAP_CUTS} gaps, got {gaps}")
    return {"gap_ms": statistics.median(gaps) * 1000, "gap_max_ms": max(gaps) * 1000, **load}


def _subchannels_trial(count: int) -> Callable[..., dict[str, float]]:
    def trial(session: Session, impl: str, index: int) -> dict[str, float]:
        left, right, load = session.run_pair(
            impl, ("echo-server", []), ("echo-client", ["--count", str(count)])
        )
        return {
            "echoed_s": right["all_echoed"] - right["started"],
            "closed_s": right["all_closed"] - right["started"],
            "client_rss": right["maxrss_mib"],
            "server_rss": left["maxrss_mib"],
            **load,
        }

    return trial


def _wormholes_trial(count: int) -> Callable[..., dict[str, float]]:
    def trial(session: Session, impl: str, index: int) -> dict[str, float]:
        base = session.nameplate_block(count)
        extra = ["--count", str(count), "--nameplate-base", str(base)]
        left, right, load = session.run_pair(
            impl, ("many-server", extra), ("many-client", extra), code=secrets.token_hex(4)
        )
        started = max(left["started"], right["started"])
        return {
            "ready_s": max(left["ready"], right["ready"]) - started,
            "server_mib_per": (left["rss_ready_mib"] - left["rss_before_mib"]) / count,
            "client_mib_per": (right["rss_ready_mib"] - right["rss_before_mib"]) / count,
            "server_rss": left["maxrss_mib"],
            "client_rss": right["maxrss_mib"],
            **load,
        }

    return trial


def figures(quick: bool, pairs: int, quick_mib: int = 64) -> list[Figure]:
    """Every figure (``quick``: only the small bulk transfer of the CI guard)."""
    if quick:
        title = f"bulk {quick_mib} MiB, 64 KiB writes, receiver SHA-256"
        rows = (
            Row("mbps", title, "MB/s", True, 1.5),
            Row("cpu", "  CPU for the transfer, sender + receiver", "s", False, 1 / 1.5, 3),
        )
        return [Figure("bulk-quick", rows, _bulk_trial(quick_mib * MiB, 64 << 10), pairs)]
    bulk_rows = (
        Row("mbps", "bulk 256 MiB, 64 KiB writes, receiver SHA-256", "MB/s", True, 3.0),
        Row("recv_cpu", "  receiver CPU for the transfer", "s", False, None, 2),
        Row("send_cpu", "  sender CPU for the transfer", "s", False, None, 2),
        Row("cpu", "  CPU for the transfer, sender + receiver", "s", False, None, 2),
        Row("recv_rss", "  peak RSS receiver", "MiB", False, 1.0),
        Row("send_rss", "  peak RSS sender", "MiB", False, 1.0),
    )
    return [
        Figure("bulk", bulk_rows, _bulk_trial(256 * MiB, 64 << 10), pairs),
        Figure(
            "bulk-5MiB",
            (
                Row("mbps", "bulk 256 MiB, 5 MiB writes, receiver SHA-256", "MB/s", True, 1.0),
                Row("recv_rss", "  peak RSS receiver", "MiB", False, 1.0),
                Row("send_rss", "  peak RSS sender", "MiB", False, 1.0),
            ),
            _bulk_trial(256 * MiB, 5 * MiB),
            pairs,
        ),
        Figure(
            "bulk-1KiB",
            (Row("mbps", "bulk 16 MiB, 1 KiB writes, receiver SHA-256", "MB/s", True, 1.0, 1),),
            _bulk_trial(16 * MiB, 1 << 10),
            pairs,
        ),
        Figure(
            "dilate",
            (
                Row("dilate_ms", "create() -> when_dilated, both sides", "ms", False, 1.0),
                Row("keyed_ms", "  key exchange -> when_dilated", "ms", False, 1.0),
            ),
            _dilate_trial,
            pairs,
        ),
        Figure(
            "gap",
            (
                Row("gap_ms", "L2 abort -> data flowing again (median of 5)", "ms", False, 1.0, 1),
                Row("gap_max_ms", "  worst of the 5", "ms", False, None, 1),
            ),
            _gap_trial,
            pairs,
        ),
        Figure(
            "subchannels",
            (
                Row("echoed_s", "10,000 subchannels at once: all echoed", "s", False, None, 2),
                Row("closed_s", "  ... and all closed", "s", False, None, 2),
                Row("client_rss", "  peak RSS opener", "MiB", False, None),
                Row("server_rss", "  peak RSS echoer", "MiB", False, None),
            ),
            _subchannels_trial(10_000),
            max(1, min(pairs, 3)),
        ),
        Figure(
            "wormholes",
            (
                Row(
                    "ready_s", "100 dilated wormholes per process: all echoed", "s", False, None, 2
                ),
                Row("server_mib_per", "  RSS per wormhole, listening side", "MiB", False, None, 2),
                Row("client_mib_per", "  RSS per wormhole, connecting side", "MiB", False, None, 2),
            ),
            _wormholes_trial(100),
            max(1, min(pairs, 3)),
        ),
    ]


# ---------------------------------------------------------------------------------------------
# running and reporting


def run_figure(session: Session, figure: Figure, log: Callable[[str], None]) -> dict[str, Any]:
    """Run ``figure.pairs`` alternating pairs; returns every trial and the load."""
    trials: dict[str, list[dict[str, float]]] = {impl: [] for impl in IMPLS}
    main = figure.rows[0]
    for index in range(figure.pairs):
        for impl in IMPLS:
            trial = figure.trial(session, impl, index)
            trials[impl].append(trial)
            value = f"{trial[main.key]:.{main.digits + 1}f}"
            load = f"load {trial['loadavg1']:.1f}, other CPU {trial['other_cores']:.2f} cores"
            log(f"  {figure.name} #{index + 1} {impl:10} {main.key}={value}  ({load})")
    return {"name": figure.name, "trials": trials}


def summarize(figure: Figure, trials: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """Medians per implementation and the median per-pair txdilation/stock ratio per row."""
    rows = []
    for row in figure.rows:
        stock = [t[row.key] for t in trials["stock"]]
        ours = [t[row.key] for t in trials["txdilation"]]
        ratios = [o / s for s, o in zip(stock, ours, strict=True) if s > 0]
        ratio = statistics.median(ratios) if ratios else float("nan")
        met = None
        if row.goal is not None:
            met = ratio >= row.goal if row.higher_is_better else ratio <= row.goal
        rows.append(
            {
                "figure": figure.name,
                "key": row.key,
                "title": row.title,
                "unit": row.unit,
                "stock": statistics.median(stock),
                "txdilation": statistics.median(ours),
                "ratio": ratio,
                "ratios": ratios,
                "higher_is_better": row.higher_is_better,
                "goal": row.goal,
                "met": met,
                "digits": row.digits,
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the summarized rows (indented titles are details of the row above)."""
    lines = [
        "| figure | unit | stock | txdilation | txdilation/stock | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        title = r["title"].strip()
        if r["title"].startswith("  "):
            title = "&nbsp;&nbsp;" + title
        target = ""
        if r["goal"] is not None:
            sign = ">=" if r["higher_is_better"] else "<="
            target = f"{sign} {r['goal']:g}: {'met' if r['met'] else 'NOT MET'}"
        d = r["digits"]
        values = f"{r['stock']:.{d}f} | {r['txdilation']:.{d}f} | {r['ratio']:.2f}"
        lines.append(f"| {title} | {r['unit']} | {values} | {target} |")
    return "\n".join(lines)


def load_summary(results: list[dict[str, Any]]) -> str:
    """Load during the runs, per implementation (medians and ranges)."""
    lines = []
    for impl in IMPLS:
        loads = [t["loadavg1"] for r in results for t in r["trials"][impl]]
        others = [t["other_cores"] for r in results for t in r["trials"][impl]]
        if not loads:
            continue
        lines.append(
            f"- {impl}: {len(loads)} runs; 1-minute load average "
            f"{statistics.median(loads):.1f} (median; {min(loads):.1f} to {max(loads):.1f}); "
            f"other processes kept {statistics.median(others):.2f} cores busy "
            f"(median; {min(others):.2f} to {max(others):.2f})"
        )
    return "\n".join(lines)


def limits_summary(limits: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The raw limits measured in this session, and txdilation's bulk figure against them."""
    c = limits["crypto"]
    tcp, tuned = limits["raw_tcp_mbps"], limits["raw_tcp_l2_buffers_mbps"]
    count = len(limits["raw_tcp_runs"])
    lines = [
        f"- raw Twisted TCP, two processes, the same sender and receiver (256 MiB in 64 KiB "
        f"writes, receiver SHA-256), median of {count}: {tcp:.0f} MB/s with Twisted's default "
        f"64 KiB buffers (receiver CPU {limits['raw_tcp_recv_cpu']:.2f} s), {tuned:.0f} MB/s with "
        f"{TCP_BUFFER_SIZE // 1024} KiB buffers as txdilation's L2 sets them (receiver CPU "
        f"{limits['raw_tcp_l2_buffers_recv_cpu']:.2f} s)",
        f"- ChaCha20-Poly1305 (cryptography), 65519-byte pieces: encrypt {c['chacha_encrypt']:.0f}"
        f", decrypt {c['chacha_decrypt']:.0f} MB per CPU-second; through txdilation's Noise "
        f"session: {c['noise_encrypt']:.0f} / {c['noise_decrypt']:.0f}",
        f"- SHA-256, 64 KiB blocks: {c['sha256']:.0f} MB per CPU-second",
    ]
    bulk = [r for r in rows if r["key"] == "mbps" and r["figure"] in ("bulk", "bulk-quick")]
    for r in bulk:
        lines.append(
            f"- {r['title']}: txdilation at {100 * r['txdilation'] / tuned:.0f}%, stock at "
            f"{100 * r['stock'] / tuned:.0f}% of raw TCP with txdilation's buffers"
        )
    return "\n".join(lines)


def environment_summary() -> str:
    """Machine and versions, for the record."""
    from importlib.metadata import version

    packages = ["magic-wormhole", "twisted", "cryptography", "noiseprotocol", "automat"]
    versions = ", ".join(f"{name} {version(name)}" for name in packages)
    return (
        f"- {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {versions}; "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns 0 (1 when a run failed)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="only a small bulk transfer (CI guard)")
    p.add_argument("--pairs", type=int, default=None, help="alternating pairs per figure")
    p.add_argument("--quick-mib", type=int, default=64, help="--quick: MiB to transfer")
    p.add_argument("--only", default=None, help="comma-separated figure names")
    p.add_argument("--json", default=None, help="write all measurements to this file")
    p.add_argument("--profile", default=None, help="directory for cProfile output of bulk peers")
    p.add_argument("--no-limits", action="store_true", help="skip the raw TCP and crypto limits")
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    args = p.parse_args(argv)
    pairs = args.pairs or (3 if args.quick else 5)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    chosen = figures(args.quick, pairs, args.quick_mib)
    if args.only:
        names = set(args.only.split(","))
        chosen = [f for f in chosen if f.name in names]
    env = child_environment()
    mailbox, url = start_mailbox(env)
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    session = Session(url, mailbox.pid, args.timeout, profile_dir, env)
    results: list[dict[str, Any]] = []
    limits: dict[str, Any] = {}
    try:
        for figure in chosen:
            log(f"{figure.name}: {figure.pairs} alternating pairs")
            results.append(run_figure(session, figure, log))
        if not args.no_limits:
            log("limits: raw TCP and crypto")
            count = 1 if args.quick else 3
            for key, buffer in (("raw_tcp", 0), ("raw_tcp_l2_buffers", TCP_BUFFER_SIZE)):
                runs = [session.run_raw_tcp(256 * MiB, 64 << 10, buffer) for _ in range(count)]
                limits[f"{key}_mbps"] = statistics.median(r["mbps"] for r in runs)
                limits[f"{key}_recv_cpu"] = statistics.median(r["recv_cpu"] for r in runs)
                limits[f"{key}_runs"] = runs
            limits["crypto"] = session.run_crypto()
    except BenchmarkError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        assert mailbox.stdin is not None
        mailbox.stdin.close()
        mailbox.wait(timeout=30)
    rows = [
        row
        for figure, result in zip(chosen, results, strict=True)
        for row in summarize(figure, result["trials"])
    ]
    print(format_table(rows))
    print("\nLoad during the runs:\n" + load_summary(results))
    if limits:
        print("\nLimits measured in the same session:\n" + limits_summary(limits, rows))
    print("\n" + environment_summary())
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "results": results, "limits": limits}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
