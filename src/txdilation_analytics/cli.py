"""``txdilation-analytics``: the command line of the pipeline (argparse).

Subcommands ``ingest``, ``sessionize``, ``aggregate``, ``report``, ``analyze`` (all four),
``synth`` and ``bundle`` (the package as a zip for ``spark-submit --py-files``). Exit status 0
on success, 2 for usage and input errors (one line on stderr, given before the JVM starts for
local inputs and outputs), 1 for anything else. ``--master`` is passed to Spark only when
given, so that ``spark-submit --master`` wins.

What the terminal shows: progress lines on stderr (``-q``: none), then a few lines on stdout
saying what was done and where it was written (:mod:`.lines`); the figures themselves are in
files (``report/summary.json``, each layer's ``_stage.json``). Spark's own output goes to a
temporary file, named when the run fails (``-v``: on stderr instead). Small runs (local inputs
and tables under :data:`~.inputs.SMALL_INPUT_BYTES`) use Spark's small profile
(:mod:`.session`) unless ``--no-fast-start`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from .errors import InputError
from .inputs import (
    SMALL_INPUT_BYTES,
    SOURCES,
    DayRange,
    Inputs,
    check_stage,
    local_bytes,
    parse_day,
)

PROG = "txdilation-analytics"
SMALL_SYNTH_SESSIONS = 10_000


def version_text() -> str:
    """``txdilation-analytics VERSION (pyspark VERSION, Python VERSION)``; no JVM started."""
    from importlib import metadata

    from txdilation import __version__

    try:
        pyspark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pyspark = "not installed"
    python = ".".join(map(str, sys.version_info[:3]))
    return f"{PROG} {__version__} (pyspark {pyspark}, Python {python})"


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (no usage text first), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive whole number, got {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 1, got {text!r}")
    return value


def _day(text: str) -> Any:
    try:
        return parse_day(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a day YYYY-MM-DD, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    common = _Parser(add_help=False)
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
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Spark's small profile: quick JVM, no code generation (default: chosen by the "
        f"size of the inputs, under {SMALL_INPUT_BYTES >> 20} MiB)",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    common.add_argument(
        "-v", "--verbose", action="store_true", help="Spark's own log on stderr too"
    )

    inputs = _Parser(add_help=False)
    inputs.add_argument("--events", metavar="GLOB", help="txdilation telemetry JSON lines")
    inputs.add_argument("--mailbox-usage-db", metavar="FILE", help="mailbox server --usage-db")
    inputs.add_argument("--transit-log", metavar="FILE", help="transit relay --log-fd output")
    inputs.add_argument("--transit-usage-db", metavar="FILE", help="transit relay --usage-db")
    inputs.add_argument("--client-timing", metavar="GLOB", help="stock --dump-timing files")

    days = _Parser(add_help=False)
    days.add_argument(
        "--from", dest="first", type=_day, metavar="DAY", help="first day (UTC) to analyze"
    )
    days.add_argument("--to", dest="last", type=_day, metavar="DAY", help="last day to analyze")

    versioned = _Parser(add_help=False)  # every command takes --version
    versioned.add_argument(
        "-V",
        "--version",
        action="version",
        version=version_text(),
        help="print the versions and exit",
    )
    parser = _Parser(
        prog=PROG,
        description="Spark pipeline: dilation telemetry and wormhole server records to reports.",
        parents=[versioned],
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    sub.add_parser(
        "ingest", parents=[versioned, common, inputs], help="new inputs -> bronze Parquet"
    )
    sub.add_parser("sessionize", parents=[versioned, common, days], help="bronze -> silver tables")
    sub.add_parser("aggregate", parents=[versioned, common], help="silver -> gold daily tables")
    sub.add_parser("report", parents=[versioned, common], help="-> report/index.html, summary.json")
    sub.add_parser("analyze", parents=[versioned, common, inputs, days], help="all four stages")
    synth = sub.add_parser(
        "synth", parents=[versioned, common], help="write synthetic event logs and server records"
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
        type=_fraction,
        default=0.0,
        metavar="P",
        help="fraction of event lines to damage",
    )
    synth.add_argument(
        "--compress", action="store_true", help="gzip the event files (part-*.txt.gz)"
    )
    bundle = sub.add_parser(
        "bundle",
        parents=[versioned],
        help="write this package as a zip for spark-submit --py-files (no Spark)",
    )
    bundle.add_argument("--output", required=True, metavar="FILE.zip")
    return parser


def _inputs(args: argparse.Namespace) -> Inputs | None:
    """The inputs of ``ingest`` and ``analyze`` (None for ``analyze`` without any: it then
    analyzes what was ingested before)."""
    if args.command not in ("ingest", "analyze"):
        return None
    inputs = Inputs(**{name: getattr(args, name) for name in SOURCES})
    return None if args.command == "analyze" and not inputs.given() else inputs


def _days(args: argparse.Namespace) -> DayRange | None:
    if args.command not in ("sessionize", "analyze"):
        return None
    return DayRange(args.first, args.last)


def small_profile(args: argparse.Namespace, inputs: Inputs | None) -> bool:
    """Whether this run uses Spark's small profile: ``--[no-]fast-start`` if given, else
    local runs reading less than :data:`~.inputs.SMALL_INPUT_BYTES` (inputs and the tables
    already under the output) outside spark-submit."""
    if args.fast_start is not None:
        return bool(args.fast_start)
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    if args.master and not args.master.startswith("local"):
        return False
    if args.command == "synth":
        return bool(args.sessions <= SMALL_SYNTH_SESSIONS)
    layer = {"aggregate": "silver", "report": "silver"}.get(args.command, "bronze")
    paths = [os.path.join(args.output, layer)]
    if inputs is not None:
        paths += [p for files in inputs.files().values() for p in files]
    size = local_bytes(paths)
    return size is not None and size < SMALL_INPUT_BYTES


def run(args: argparse.Namespace, spark_log: IO[Any] | None = None) -> Any:
    """Run one parsed command; returns what the stage returned.

    :raises InputError: bad inputs, or a stage run before the one it reads from (local
        inputs and outputs are checked before the JVM starts).
    """
    from .pipeline import Pipeline, Progress
    from .session import get_spark

    inputs, days = _inputs(args), _days(args)
    if inputs is not None:
        inputs.check()
    check_stage("sessionize" if args.command == "analyze" and inputs is None else args.command,
                args.output)  # fmt: skip
    progress = Progress(quiet=args.quiet)
    small = small_profile(args, inputs)
    progress.say(  # at once: the JVM's start is the longest silence of a small run
        "starting Spark (a JVM" + (", its small profile" if small else "") + "): often 10 to 30 s"
    )
    spark = get_spark(
        args.master,
        driver_memory=args.driver_memory,
        shuffle_partitions=args.shuffle_partitions,
        small=small,
        extra=dict(args.conf),
        spark_log=spark_log,
    )
    progress.say(f"Spark {spark.version} on {spark.sparkContext.master}")
    if args.command == "synth":
        from .synth import SynthOptions, synthesize

        fields = ("sessions", "seed", "days", "start_date", "files", "corrupt_rate", "compress")
        options = SynthOptions(**{name: getattr(args, name) for name in fields})
        return synthesize(spark, args.output, options, progress)
    pipeline = Pipeline(spark, args.output, progress)
    if args.command == "ingest":
        assert inputs is not None
        return pipeline.ingest(inputs)
    if args.command == "analyze":
        return pipeline.analyze(inputs, days)
    if args.command == "sessionize":
        return pipeline.sessionize(days)
    return getattr(pipeline, args.command)()


def _failure(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``txdilation-analytics``; returns the exit status."""
    from .lines import result_lines

    args = build_parser().parse_args(argv)
    prefix = f"{PROG} {args.command}"
    if args.command == "bundle":
        from .bundle import write_bundle

        names = write_bundle(args.output)
        print(f"bundle: {len(names)} files in {os.path.abspath(args.output)}")
        return 0
    log = None
    if not args.verbose and "PYSPARK_GATEWAY_PORT" not in os.environ:
        log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (the JVM writes it until exit)
            "w", prefix="txdilation-analytics-spark-", suffix=".log", delete=False
        )
    status = 1
    try:
        result = run(args, log)
        status = 0
    except InputError as e:
        print(f"{prefix}: error: {e}", file=sys.stderr)
        status = 2
    except ImportError as e:
        extra = "pip install -e '.[analytics]' (in a checkout)"
        print(f"{PROG}: {e}; install the extra: {extra}", file=sys.stderr)
        status = 2
    except Exception as e:
        if _spark_input_error(e):
            print(f"{prefix}: error: {_failure(e)}", file=sys.stderr)
            status = 2
        else:
            if args.verbose:
                raise
            where = f"; Spark's log: {log.name}" if log is not None else ""
            print(f"{prefix}: failed: {_failure(e)} (-v for details{where})", file=sys.stderr)
    finally:
        if log is not None and status != 1:
            os.unlink(log.name)
    if status == 0:
        for line in result_lines(args.command, result, args.output):
            print(line)
    return status


def _spark_input_error(e: BaseException) -> bool:
    """True for Spark's errors about a remote input or output path that does not exist."""
    condition = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    try:
        name = condition() if condition is not None else None
    except Exception:
        return False
    return name == "PATH_NOT_FOUND"
