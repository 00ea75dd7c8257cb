"""The command line, input errors, Spark configuration, schema derivation, scrubbing, synth."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
from twisted.trial.unittest import SynchronousTestCase

from txdilation import telemetry

from ._spark import have_spark, spark

SKIP_NO_SPARK = have_spark()
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))


def run_cli_out(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit status, stdout, stderr)."""
    from txdilation_analytics.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(list(argv))
        except SystemExit as e:  # argparse
            status = int(e.code or 0)
    return status, out.getvalue(), err.getvalue()


def run_cli(*argv: str) -> tuple[int, str]:
    """Run the CLI in-process; returns (exit status, stderr)."""
    status, _, err = run_cli_out(*argv)
    return status, err


class InputErrorTests(SynchronousTestCase):
    """Clear one-line errors (exit 2) before Spark starts."""

    def setUp(self) -> None:
        if importlib_missing("pyspark"):
            self.skipTest("pyspark is not installed")
        self.out = self.mktemp()

    def test_no_inputs(self) -> None:
        """ingest without any input says which options exist; analyze without any analyzes
        what was ingested, so with nothing ingested it says to run ingest first."""
        status, err = run_cli("ingest", "--output", self.out)
        self.assertEqual(status, 2)
        self.assertIn("needs at least one of --events", err)
        status, err = run_cli("analyze", "--output", self.out)
        self.assertEqual(status, 2)
        self.assertIn(f"no bronze tables under {self.out}: run ingest first", err)

    def test_missing_files(self) -> None:
        """Each missing input is named with its option and path."""
        for option in ("--mailbox-usage-db", "--transit-log", "--transit-usage-db"):
            status, err = run_cli("ingest", option, "/nonexistent/x", "--output", self.out)
            self.assertEqual(status, 2)
            self.assertIn(f"{option}: no such file '/nonexistent/x'", err)
        for option in ("--events", "--client-timing"):
            status, err = run_cli("analyze", option, "/nonexistent/*.jsonl", "--output", self.out)
            self.assertEqual(status, 2)
            self.assertIn(f"{option}: no file matches", err)
        self.assertFalse(os.path.exists(self.out))

    def test_usage_errors(self) -> None:
        """Malformed options are argparse errors (exit 2), each ONE line ending with where to
        look, not the usage text first."""
        self.assertEqual(run_cli("synth", "--sessions", "0", "--output", self.out)[0], 2)
        self.assertEqual(run_cli("report", "--output", self.out, "--conf", "novalue")[0], 2)
        status, err = run_cli("frobnicate")
        self.assertEqual(status, 2)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith("txdilation-analytics: error: argument COMMAND: "), err)
        self.assertTrue(err.rstrip().endswith("see 'txdilation-analytics --help'"), err)


class VersionTests(SynchronousTestCase):
    """``--version`` (and ``-V``), as every txdilation command has."""

    def test_version(self) -> None:
        """``--version`` and ``-V``: the versions of this package, PySpark and Python on one
        line, exit 0."""
        from txdilation_analytics.cli import main

        for option in ("--version", "-V"):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as raised:
                main([option])
            self.assertEqual(raised.exception.code, 0)
            self.assertRegex(
                out.getvalue(), r"^txdilation-analytics \S+ \(pyspark \S+, Python 3\.\d+\.\d+\)\n$"
            )


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


def run_without_jvm(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the command line in a child whose Spark cannot start (SPARK_HOME points nowhere):
    anything it reports came before the JVM."""
    env = dict(os.environ, SPARK_HOME="/nonexistent-spark-home", PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "txdilation_analytics", *argv],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


class BeforeTheJvmTests(SynchronousTestCase):
    """Input errors, stage order and --version answer without starting the JVM (a child
    whose Spark cannot start still reports them, in one line, exit status 2)."""

    def setUp(self) -> None:
        if importlib_missing("pyspark"):
            self.skipTest("pyspark is not installed")
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)
        self.out = os.path.join(self.dir, "out")

    def assertOneLineError(self, proc: subprocess.CompletedProcess[str], text: str) -> None:
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn(text, proc.stderr)
        self.assertEqual(proc.stdout, "")

    def test_not_usage_databases(self) -> None:
        """A non-SQLite file and a DB without the usage tables, for either server."""
        junk = os.path.join(self.dir, "junk.sqlite")
        with open(junk, "w") as f:
            f.write("not a database at all" * 100)
        other = os.path.join(self.dir, "other.sqlite")
        sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
        proc = run_without_jvm("ingest", "--mailbox-usage-db", junk, "--output", self.out)
        self.assertOneLineError(proc, "is not an SQLite database")
        proc = run_without_jvm("analyze", "--transit-usage-db", other, "--output", self.out)
        self.assertOneLineError(proc, "not a usage database (missing table 'usage')")
        proc = run_without_jvm("ingest", "--mailbox-usage-db", other, "--output", self.out)
        self.assertOneLineError(proc, "not a usage database (missing table 'client_versions')")
        self.assertFalse(os.path.exists(self.out))

    def test_stage_order(self) -> None:
        """A stage run before the one it reads from says which stage to run first."""
        for command, first in (("sessionize", "ingest"), ("aggregate", "sessionize"),
                               ("report", "aggregate")):  # fmt: skip
            proc = run_without_jvm(command, "--output", self.out)
            self.assertOneLineError(proc, f"run {first} first")

    def test_bad_days(self) -> None:
        """--from/--to take ISO days, in order."""
        proc = run_without_jvm("sessionize", "--output", self.out, "--from", "2026-02-30")
        self.assertOneLineError(proc, "--from: expected a day YYYY-MM-DD, got '2026-02-30'")
        events = os.path.join(self.dir, "e.jsonl")
        with open(events, "w") as f:
            f.write("{}\n")
        proc = run_without_jvm(
            "analyze", "--events", events, "--output", self.out, "--from", "2026-01-06",
            "--to", "2026-01-05",
        )  # fmt: skip
        self.assertOneLineError(proc, "--from 2026-01-06 is after --to 2026-01-05")

    def test_version(self) -> None:
        """--version names this package, pyspark and Python."""
        proc = run_without_jvm("--version")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertRegex(
            proc.stdout, r"^txdilation-analytics \S+ \(pyspark \S+, Python 3\.\d+\.\d+\)\n$"
        )


class SessionConfTests(SynchronousTestCase):
    """The Spark configuration asked for, local and under spark-submit."""

    def setUp(self) -> None:
        if importlib_missing("pyspark"):
            self.skipTest("pyspark is not installed")
        saved = os.environ.pop("PYSPARK_GATEWAY_PORT", None)
        if saved is not None:
            self.addCleanup(os.environ.__setitem__, "PYSPARK_GATEWAY_PORT", saved)

    def test_profiles(self) -> None:
        """The small profile: quick JVM, no code generation, no adaptive plans, 2 shuffle
        partitions; the default one: adaptive, one writer per day partition, Spark's shuffle
        partitions."""
        from txdilation_analytics.session import SMALL_JAVA_OPTIONS, spark_conf

        small = spark_conf("local[2]", small=True)
        self.assertEqual(small["spark.driver.extraJavaOptions"], SMALL_JAVA_OPTIONS)
        self.assertEqual(small["spark.sql.codegen.factoryMode"], "NO_CODEGEN")
        self.assertEqual(small["spark.sql.adaptive.enabled"], "false")
        self.assertEqual(small["spark.sql.shuffle.partitions"], "2")
        self.assertEqual(small["spark.txdilation.profile"], "small")
        large = spark_conf("local[2]")
        self.assertEqual(large["spark.driver.extraJavaOptions"], "-XX:-DontCompileHugeMethods")
        self.assertEqual(large["spark.executor.extraJavaOptions"], "-XX:-DontCompileHugeMethods")
        self.assertNotIn("spark.sql.codegen.factoryMode", large)
        self.assertEqual(large["spark.sql.adaptive.enabled"], "true")
        self.assertNotIn("spark.sql.shuffle.partitions", large)
        self.assertEqual(large["spark.txdilation.profile"], "default")

    def test_small_by_size(self) -> None:
        """The small profile is chosen for local inputs (and tables) under the threshold,
        unless --[no-]fast-start says otherwise or the master is a cluster's."""
        from txdilation_analytics.cli import build_parser, small_profile
        from txdilation_analytics.inputs import SMALL_INPUT_BYTES

        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        small, large = os.path.join(tmp, "small.jsonl"), os.path.join(tmp, "large.jsonl")
        with open(small, "w") as f:
            f.write("{}\n")
        with open(large, "wb") as f:
            f.truncate(SMALL_INPUT_BYTES)  # sparse: no disk used

        def choose(*argv: str) -> bool:
            from txdilation_analytics.cli import _inputs

            args = build_parser().parse_args(["analyze", "--output", tmp, *argv])
            return small_profile(args, _inputs(args))

        self.assertTrue(choose("--events", small))
        self.assertFalse(choose("--events", large))
        self.assertTrue(choose("--events", large, "--fast-start"))
        self.assertFalse(choose("--events", small, "--no-fast-start"))
        self.assertFalse(choose("--events", small, "--master", "spark://head:7077"))

    def test_local(self) -> None:
        """Local runs bind the driver to 127.0.0.1, UI off, UTC, small shuffles."""
        from txdilation_analytics.session import spark_conf

        conf = spark_conf("local[2]", shuffle_partitions=3, fast_start=True, driver_memory="2g")
        self.assertEqual(conf["spark.driver.host"], "127.0.0.1")
        self.assertEqual(conf["spark.driver.bindAddress"], "127.0.0.1")
        self.assertEqual(conf["spark.ui.enabled"], "false")
        self.assertEqual(conf["spark.sql.session.timeZone"], "UTC")
        self.assertEqual(conf["spark.sql.shuffle.partitions"], "3")
        self.assertEqual(conf["spark.driver.memory"], "2g")
        self.assertIn("-XX:+UseSerialGC", conf["spark.driver.extraJavaOptions"])
        self.assertNotIn("spark.master", conf)

    def test_cluster_and_submit(self) -> None:
        """A cluster master or spark-submit: no loopback binding, no master, no driver JVM
        options (the JVM runs already)."""
        from txdilation_analytics.session import spark_conf

        conf = spark_conf("spark://head:7077")
        self.assertNotIn("spark.driver.host", conf)
        os.environ["PYSPARK_GATEWAY_PORT"] = "1"
        self.addCleanup(os.environ.pop, "PYSPARK_GATEWAY_PORT")
        conf = spark_conf(None, driver_memory="8g", fast_start=True)
        self.assertNotIn("spark.driver.host", conf)
        self.assertNotIn("spark.driver.memory", conf)
        self.assertNotIn("spark.driver.extraJavaOptions", conf)
        self.assertNotIn("spark.master", conf)


class SchemaTests(SynchronousTestCase):
    """The Spark event type is derived from the JSON Schema the emitter is tested against."""

    def setUp(self) -> None:
        if importlib_missing("pyspark"):
            self.skipTest("pyspark is not installed")

    def test_fields_match_json_schema(self) -> None:
        """Every property of every event is a typed column, with matching JSON types."""
        from pyspark.sql import types as T

        from txdilation_analytics import schemas

        doc = json.loads(telemetry.schema_text())
        names = set(doc["properties"])
        for clause in doc["allOf"]:
            names |= set(clause["then"]["properties"])
        fields = {f.name: f.dataType for f in schemas.event_type().fields}
        self.assertEqual(set(fields), names)
        self.assertEqual(fields["ts"], T.DoubleType())
        self.assertEqual(fields["seq"], T.LongType())
        self.assertEqual(fields["via_relay"], T.BooleanType())
        self.assertEqual(fields["hints"], T.MapType(T.StringType(), T.LongType()))
        rules = schemas.event_rules()
        self.assertEqual(set(rules.required), set(telemetry.EVENTS))
        self.assertEqual(set(rules.enums["hint_type"]), set(telemetry.HINT_TYPES))


class ScrubTests(SynchronousTestCase):
    """Stock --dump-timing entries lose bodies, sides, welcome data and addresses."""

    def test_scrub(self) -> None:
        """Only names, times and allow-listed short details survive."""
        from txdilation_analytics.sources import timing_rows

        data = [
            {"name": "ws_receive", "start": 1.0, "stop": None, "details": {
                "_side": "abcdef0123", "message": {
                    "type": "welcome", "welcome": {"your-address": "10.1.2.3"},
                    "server_rx": 0.5, "server_tx": 0.75}}},
            {"name": "ws_send", "start": 2.0, "stop": None, "details": {
                "_side": "abcdef0123", "type": "add", "phase": "pake",
                "body": "7b2270616b655f7631223a202235343337"}},
            {"name": "pake1", "start": 3.0, "stop": 3.5, "details": {"waiting": "crypto"}},
            {"name": "x", "start": 4.0, "details": {"waiting": "192.168.0.1"}},
            {"name": 5}, "junk",
        ]  # fmt: skip
        rows, bad = timing_rows("t.json", data)
        self.assertEqual(bad, 2)
        text = json.dumps(rows)
        for secret in ("abcdef0123", "10.1.2.3", "7b2270", "192.168.0.1", "your-address"):
            self.assertNotIn(secret, text)
        self.assertEqual(
            rows[0][1:], (0, "ws_receive", 1.0, None, None, "welcome", None, 0.5, 0.75)
        )
        self.assertEqual(rows[1][6:8], ("add", "pake"))
        self.assertEqual(rows[2][2:6], ("pake1", 3.0, 3.5, "crypto"))
        self.assertEqual(timing_rows("t.json", {"not": "a list"}), ([], 1))


@pytest.mark.spark
class SparkCliTests(SynchronousTestCase):
    """CLI paths that need Spark: synth."""

    def setUp(self) -> None:
        if SKIP_NO_SPARK:
            self.skipTest(SKIP_NO_SPARK)
        spark()
        self.dir = os.path.abspath(self.mktemp())
        os.makedirs(self.dir)

    def _synth(self, name: str, *extra: str) -> list[str]:
        out = os.path.join(self.dir, name)
        status, err = run_cli("synth", "--sessions", "41", "--days", "2", "--output", out, "-q",
                              *extra)  # fmt: skip
        self.assertEqual(status, 0, err)
        lines: list[str] = []
        for name in sorted(os.listdir(os.path.join(out, "events"))):
            if name.startswith("part-"):
                with open(os.path.join(out, "events", name)) as f:
                    lines.extend(f.read().splitlines())
        return lines

    def test_synth(self) -> None:
        """synth is deterministic per seed, schema-valid, N sessions, damaged at the rate."""
        validator = jsonschema.Draft202012Validator(json.loads(telemetry.schema_text()))
        first = self._synth("a", "--seed", "7")
        records: list[dict[str, Any]] = [json.loads(line) for line in first]
        for record in records:
            validator.validate(record)
        self.assertEqual(len({r["session"] for r in records}), 41)
        by_session: dict[str, list[tuple[int, float]]] = {}
        for r in records:
            by_session.setdefault(r["session"], []).append((r["seq"], r["ts"]))
        for session, seqs in by_session.items():
            seqs.sort()
            self.assertEqual([q for q, _ in seqs], list(range(len(seqs))), session)
            self.assertEqual([t for _, t in seqs], sorted(t for _, t in seqs), session)
        self.assertEqual(len({r["pair"] for r in records}), 21)
        self.assertEqual(self._synth("b", "--seed", "7"), first)
        damaged = self._synth("d", "--seed", "7", "--corrupt-rate", "0.2")
        self.assertEqual(len(damaged), len(first))
        broken = sum(1 for a, b in zip(first, damaged, strict=True) if a != b)
        self.assertTrue(0.1 * len(first) < broken < 0.3 * len(first), broken)
        with open(os.path.join(self.dir, "a", "transit.jsonl")) as f:
            moods = {json.loads(line)["mood"] for line in f}
        self.assertTrue(moods <= {"happy", "redundant", "lonely"}, moods)
        db = sqlite3.connect(os.path.join(self.dir, "a", "mailbox-usage.sqlite"))
        self.assertEqual(db.execute("SELECT COUNT(*) FROM client_versions").fetchone()[0], 42)
        db.close()


@pytest.mark.spark
class SmallRunTests(SynchronousTestCase):
    """``analyze`` of a small log as an operator runs it: its own JVM, the small profile."""

    def test_terminal_output(self) -> None:
        """stdout is three lines (no JSON), stderr only the pipeline's progress lines (Spark's
        own warnings went to its log file), the first saying that Spark is starting (before
        the JVM's silence), and the run used the small profile."""
        from . import golden

        if SKIP_NO_SPARK:
            self.skipTest(SKIP_NO_SPARK)
        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        events, out = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "out")
        golden.write_golden_log(events)
        proc = subprocess.run(
            [sys.executable, "-m", "txdilation_analytics", "analyze", "--events", events,
             "--output", out],
            env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(
            proc.stdout.splitlines(),
            [
                "5 sessions (2026-01-05 to 2026-01-06): 80.0 % dilated, time to dilate p50 "
                "625 ms, relay share 40.0 %, time on relay 26.7 %",
                f"report:  {out}/report/index.html",
                f"summary: {out}/report/summary.json",
            ],
        )
        for line in proc.stderr.splitlines():
            self.assertRegex(line, r"^\[ *\d+\.\ds\] ", proc.stderr)
        first, second = proc.stderr.splitlines()[:2]  # what happens is said before the JVM
        self.assertIn("starting Spark (a JVM, its small profile)", first)
        self.assertRegex(second, r"\] Spark \S+ on ")
        for layer in ("bronze", "silver", "gold", "report"):
            with open(os.path.join(out, layer, "_stage.json")) as f:
                self.assertEqual(json.load(f)["profile"], "small", layer)
