"""``txdilation-analytics``: the command line of the pipeline (argparse).

Subcommands ``ingest``, ``sessionize``, ``aggregate``, ``report``, ``analyze`` (all four) and
``synth``. Exit status 0 on success, 2 for usage and input errors (one clear line on stderr),
1 for anything else. ``--master`` is passed to Spark only when given, so that
``spark-submit --master`` wins.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .errors import InputError


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


class _OneLineErrors(argparse.ArgumentParser):
    """A usage error is one line on stderr (not the usage text too), exit status 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _versions() -> str:
    """txdilation's, PySpark's (or that it is missing) and Python's versions, one per line."""
    import platform
    from importlib import metadata

    try:
        spark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        spark = "not installed (pip install 'txdilation[analytics]')"
    return (
        f"txdilation-analytics {metadata.version('txdilation')}\n"
        f"PySpark {spark}\nPython {platform.python_version()}"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    common = _OneLineErrors(add_help=False)
    common.add_argument("--output", required=True, metavar="DIR", help="output directory")
    common.add_argument("--master", help="Spark master (default: local, or spark-submit's)")
    common.add_argument("--driver-memory", metavar="SIZE", help="e.g. 4g (local runs only)")
    common.add_argument("--shuffle-partitions", type=_positive, metavar="N")
    common.add_argument(
        "--conf",
        action="append",
        type=_conf_pair,
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    common.add_argument(
        "--fast-start",
        action="store_true",
        help="JVM options for quick small runs (-XX:+UseSerialGC -XX:TieredStopAtLevel=1)",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines")

    inputs = _OneLineErrors(add_help=False)
    inputs.add_argument("--events", metavar="GLOB", help="txdilation telemetry JSON lines")
    inputs.add_argument("--mailbox-usage-db", metavar="FILE", help="mailbox server --usage-db")
    inputs.add_argument("--transit-log", metavar="FILE", help="transit relay --log-fd output")
    inputs.add_argument("--transit-usage-db", metavar="FILE", help="transit relay --usage-db")
    inputs.add_argument("--client-timing", metavar="GLOB", help="stock --dump-timing files")

    parser = _OneLineErrors(
        prog="txdilation-analytics",
        description="Spark pipeline: dilation telemetry and wormhole server records to reports.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the versions, one per line
    )
    parser.add_argument(
        "-V", "--version", action="version", version=_versions(), help="print the versions"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("ingest", parents=[common, inputs], help="sources -> bronze Parquet")
    sub.add_parser("sessionize", parents=[common], help="bronze -> silver tables")
    sub.add_parser("aggregate", parents=[common], help="silver -> gold daily tables")
    sub.add_parser("report", parents=[common], help="-> report/index.html, summary.json")
    sub.add_parser("analyze", parents=[common, inputs], help="all four stages")
    synth = sub.add_parser(
        "synth", parents=[common], help="write synthetic event logs and server records"
    )
    synth.add_argument("--sessions", type=_positive, required=True, metavar="N")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--days", type=_positive, default=7)
    synth.add_argument("--start-date", default="2026-01-05", metavar="YYYY-MM-DD")
    synth.add_argument(
        "--files",
        type=_positive,
        default=None,
        metavar="N",
        help="event files to write (default: one per ~50,000 sessions)",
    )
    synth.add_argument(
        "--corrupt-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="fraction of event lines to damage",
    )
    return parser


def _spark(args: argparse.Namespace) -> Any:
    from .session import get_spark

    return get_spark(
        args.master,
        driver_memory=args.driver_memory,
        shuffle_partitions=args.shuffle_partitions,
        fast_start=args.fast_start,
        extra=dict(args.conf),
    )


def run(args: argparse.Namespace) -> Any:
    """Run one parsed command; returns what the stage returned (printed as JSON)."""
    from .pipeline import SOURCES, Inputs, Pipeline, Progress

    progress = Progress(quiet=args.quiet)
    inputs = None
    if args.command in ("ingest", "analyze"):
        inputs = Inputs(**{name: getattr(args, name) for name in SOURCES})
        inputs.check()  # before the JVM starts
    spark = _spark(args)
    progress.say(f"Spark {spark.version} on {spark.sparkContext.master}")
    if args.command == "synth":
        from .synth import SynthOptions, synthesize

        fields = ("sessions", "seed", "days", "start_date", "files", "corrupt_rate")
        options = SynthOptions(**{name: getattr(args, name) for name in fields})
        return synthesize(spark, args.output, options, progress)
    pipeline = Pipeline(spark, args.output, progress)
    if inputs is not None:
        return pipeline.ingest(inputs) if args.command == "ingest" else pipeline.analyze(inputs)
    return getattr(pipeline, args.command)()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``txdilation-analytics``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except InputError as e:
        print(f"txdilation-analytics {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(
            f"txdilation-analytics: {e}; install the extra: pip install 'txdilation[analytics]'",
            file=sys.stderr,
        )
        return 2
    if not args.quiet:
        print(json.dumps(result, indent=2, default=str))
    return 0
