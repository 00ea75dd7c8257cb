"""The four stages, wiring readers, pure transforms and Parquet under one output directory.

Layout under ``OUT`` (every table typed Parquet, timestamps DOUBLE Unix seconds)::

    bronze/events  mailbox_nameplates  mailbox_mailboxes  mailbox_client_versions
           transit_log  transit_db  client_timing      _stats/<source>.json  _stage.json
    silver/events  attempts  generations  sessions                           _stage.json
    gold/daily_sessions  daily_attempts  daily_losses  daily_mailboxes  daily_nameplates
         daily_transit
    report/summary.json  index.html                                          _stage.json

Invariants: ``ingest`` replaces the bronze tables of the sources it is given and keeps the
others (so the SQLite files can be ingested on the host that owns them and the event logs on
a cluster, into the same shared ``OUT``); a later stage reads a table only if its ``_SUCCESS``
marker exists, and treats a missing table as empty; bad lines are counted in
``bronze/_stats``, never fatal.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from . import bronze, gold, schemas, silver, sources, storage
from .errors import InputError
from .report import InputInfo, Meta, render_html
from .report_data import ReportTables, collect, summary_extras
from .summary import build_summary

MAILBOX_TABLES = {
    "nameplates": "mailbox_nameplates",
    "mailboxes": "mailbox_mailboxes",
    "client_versions": "mailbox_client_versions",
}
SOURCES = ("events", "mailbox_usage_db", "transit_log", "transit_usage_db", "client_timing")


@dataclass(frozen=True)
class Inputs:
    """What ``ingest`` reads; every field optional, at least one required."""

    events: str | None = None
    mailbox_usage_db: str | None = None
    transit_log: str | None = None
    transit_usage_db: str | None = None
    client_timing: str | None = None

    def given(self) -> dict[str, str]:
        """The inputs that were given, by source name."""
        return {name: getattr(self, name) for name in SOURCES if getattr(self, name)}

    def check(self) -> None:
        """Fail fast, before Spark starts, when nothing is given or a local input is missing.

        :raises InputError: with the option name and the path.
        """
        if not self.given():
            raise InputError(
                "ingest needs at least one of --events, --mailbox-usage-db, --transit-log,"
                " --transit-usage-db, --client-timing"
            )
        for name, location in self.given().items():
            option = "--" + name.replace("_", "-")
            if name in ("events", "client_timing"):
                sources.expand(option, location)
            elif not storage.is_remote(location) and not os.path.isfile(location):
                raise InputError(f"{option}: no such file {location!r}")


class Progress:
    """One line per step on a stream (stderr by default): what, how many rows, how long."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._quiet = quiet
        self._t0 = time.monotonic()

    def say(self, message: str) -> None:
        """Print one progress line prefixed with the elapsed time."""
        if not self._quiet:
            print(f"[{time.monotonic() - self._t0:7.1f}s] {message}", file=self._stream)
            self._stream.flush()

    @contextmanager
    def step(self, what: str) -> Iterator[dict[str, Any]]:
        """Time a step; the caller may set ``info["rows"]`` to have it printed."""
        info: dict[str, Any] = {}
        start = time.monotonic()
        self.say(f"{what} ...")
        yield info
        rows = f", {info['rows']:,} rows" if "rows" in info else ""
        self.say(f"{what}: done in {time.monotonic() - start:.1f}s{rows}")


class Pipeline:
    """The stages over one output directory with one SparkSession."""

    def __init__(self, spark: Any, output: str, progress: Progress | None = None) -> None:
        self.spark = spark
        self.output = storage.qualify(output)
        self.progress = progress or Progress(quiet=True)

    # --- paths and tables --------------------------------------------------------------

    def path(self, *parts: str) -> str:
        """A path under the output directory."""
        return storage.join(self.output, *parts)

    def has(self, layer: str, table: str) -> bool:
        """True if the table was written completely."""
        return storage.exists(self.spark, self.path(layer, table, "_SUCCESS"))

    def read(self, layer: str, table: str, schema: Any) -> Any:
        """The table, or an empty DataFrame of ``schema`` if it was never written."""
        if self.has(layer, table):
            return self.spark.read.parquet(self.path(layer, table))
        return self.spark.createDataFrame([], schema)

    def write(self, df: Any, layer: str, table: str, partitions: int | None = None) -> int:
        """Overwrite a table with ``df``; returns its row count (from Parquet metadata)."""
        if partitions is not None:
            df = df.coalesce(partitions)
        path = self.path(layer, table)
        df.write.mode("overwrite").parquet(path)
        return int(self.spark.read.parquet(path).count())

    def _write_json(self, obj: Any, *parts: str) -> None:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
        storage.write_text(self.spark, self.path(*parts), text)

    def _read_json(self, *parts: str) -> Any:
        return json.loads(storage.read_text(self.spark, self.path(*parts)))

    def _stage_done(self, layer: str, stage: str, started: float) -> None:
        self._write_json(
            {
                "stage": stage,
                "seconds": round(time.monotonic() - started, 3),
                "master": self.spark.sparkContext.master,
                "spark_version": self.spark.version,
            },
            layer,
            "_stage.json",
        )

    # --- ingest ------------------------------------------------------------------------

    def ingest(self, inputs: Inputs) -> dict[str, dict[str, Any]]:
        """Read the given sources into bronze tables; returns per-source stats.

        :raises InputError: no input given, or an input is missing or malformed.
        """
        inputs.check()
        given = inputs.given()
        started = time.monotonic()
        stats: dict[str, dict[str, Any]] = {}
        for source, location in given.items():
            with self.progress.step(f"ingest {source} from {location}") as info:
                stats[source] = getattr(self, f"_ingest_{source}")(location)
                stats[source]["input"] = location
                info["rows"] = stats[source]["rows"]
            if stats[source]["bad_lines"]:
                self.progress.say(
                    f"ingest {source}: {stats[source]['bad_lines']:,} bad lines "
                    f"({stats[source]['bad_by_reason']}), counted and skipped"
                )
            self._write_json(stats[source], "bronze", "_stats", f"{source}.json")
        self._stage_done("bronze", "ingest", started)
        return stats

    def _bad_stats(self, table: str) -> dict[str, Any]:
        df = self.spark.read.parquet(self.path("bronze", table))
        by_reason = {
            r["bad_reason"]: int(r["n"])
            for r in df.groupBy("bad_reason").count().withColumnRenamed("count", "n").collect()
        }
        good = by_reason.pop(None, 0)
        return {
            "rows": good,
            "bad_lines": sum(by_reason.values()),
            "bad_by_reason": dict(sorted(by_reason.items())),
        }

    def _ingest_events(self, pattern: str) -> dict[str, Any]:
        raw = sources.read_events(self.spark, pattern)
        self.write(bronze.validate_events(raw), "bronze", "events")
        return self._bad_stats("events")

    def _ingest_transit(self, raw: Any, source: str, table: str) -> dict[str, Any]:
        self.write(bronze.validate_transit(raw, source), "bronze", table, partitions=4)
        return self._bad_stats(table)

    def _ingest_transit_log(self, path: str) -> dict[str, Any]:
        return self._ingest_transit(
            sources.read_transit_log(self.spark, path), "log", "transit_log"
        )

    def _ingest_transit_usage_db(self, path: str) -> dict[str, Any]:
        raw = sources.read_transit_usage_db(self.spark, path)
        return self._ingest_transit(raw, "db", "transit_db")

    def _ingest_mailbox_usage_db(self, path: str) -> dict[str, Any]:
        frames = sources.read_mailbox_usage_db(self.spark, path)
        rows = {t: self.write(df, "bronze", MAILBOX_TABLES[t], 4) for t, df in frames.items()}
        return {"rows": sum(rows.values()), "tables": rows, "bad_lines": 0, "bad_by_reason": {}}

    def _ingest_client_timing(self, pattern: str) -> dict[str, Any]:
        df, bad = sources.read_client_timing(self.spark, pattern)
        rows = self.write(df, "bronze", "client_timing", partitions=1)
        reasons = {"malformed": bad} if bad else {}
        return {"rows": rows, "bad_lines": bad, "bad_by_reason": reasons}

    def ingest_stats(self) -> dict[str, dict[str, Any]]:
        """``bronze/_stats/<source>.json`` of every ingested source, by source."""
        return {
            source: self._read_json("bronze", "_stats", f"{source}.json")
            for source in SOURCES
            if storage.exists(self.spark, self.path("bronze", "_stats", f"{source}.json"))
        }

    def corrupt_lines(self) -> dict[str, int]:
        """Bad lines per ingested source (from ``bronze/_stats``)."""
        return {source: int(s["bad_lines"]) for source, s in self.ingest_stats().items()}

    def _require_bronze(self) -> None:
        if not storage.exists(self.spark, self.path("bronze", "_stage.json")):
            raise InputError(f"no bronze tables under {self.output}: run ingest first")

    # --- sessionize --------------------------------------------------------------------

    def sessionize(self) -> dict[str, int]:
        """bronze/events -> silver/events, attempts, generations, sessions; returns row counts."""
        self._require_bronze()
        started = time.monotonic()
        counts: dict[str, int] = {}
        events = bronze.good(self.read("bronze", "events", schemas.BRONZE_EVENTS))
        with self.progress.step("sessionize: ordering events per session") as info:
            counts["events"] = info["rows"] = self.write(
                silver.sessionize(events), "silver", "events"
            )
        ordered = self.spark.read.parquet(self.path("silver", "events"))
        for name, transform in (("attempts", silver.attempts), ("generations", silver.generations)):
            with self.progress.step(f"sessionize: {name}") as info:
                counts[name] = info["rows"] = self.write(transform(ordered), "silver", name)
        gens = self.spark.read.parquet(self.path("silver", "generations"))
        with self.progress.step("sessionize: sessions") as info:
            counts["sessions"] = info["rows"] = self.write(
                silver.sessions(ordered, gens), "silver", "sessions"
            )
        self._stage_done("silver", "sessionize", started)
        return counts

    def _silver(self, table: str) -> Any:
        if not self.has("silver", table):
            raise InputError(f"no silver/{table} under {self.output}: run sessionize first")
        return self.spark.read.parquet(self.path("silver", table))

    def _transit(self) -> Any:
        log = self.read("bronze", "transit_log", schemas.TRANSIT_USAGE)
        db = self.read("bronze", "transit_db", schemas.TRANSIT_USAGE)
        return bronze.transit_usage(log.unionByName(db))

    def _mailbox(self, table: str) -> Any:
        name = MAILBOX_TABLES[table]
        schema = {
            "nameplates": schemas.MAILBOX_NAMEPLATES,
            "mailboxes": schemas.MAILBOX_MAILBOXES,
            "client_versions": schemas.MAILBOX_CLIENT_VERSIONS,
        }[table]
        return self.read("bronze", name, schema)

    # --- aggregate ---------------------------------------------------------------------

    def aggregate(self) -> dict[str, int]:
        """silver (and bronze server tables) -> gold daily tables; returns row counts."""
        self._require_bronze()
        started = time.monotonic()
        tables: dict[str, Callable[[], Any]] = {
            "daily_sessions": lambda: gold.daily_sessions(
                self._silver("sessions"), self._silver("events")
            ),
            "daily_attempts": lambda: gold.daily_attempts(self._silver("attempts")),
            "daily_losses": lambda: gold.daily_losses(self._silver("generations")),
            "daily_mailboxes": lambda: gold.daily_results(self._mailbox("mailboxes")),
            "daily_nameplates": lambda: gold.daily_results(self._mailbox("nameplates")),
            "daily_transit": lambda: gold.daily_transit(self._transit()),
        }
        counts = {}
        for name, build in tables.items():
            with self.progress.step(f"aggregate: {name}") as info:
                counts[name] = info["rows"] = self.write(build(), "gold", name, partitions=1)
        self._stage_done("gold", "aggregate", started)
        return counts

    # --- report ------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """-> report/summary.json and report/index.html; returns the summary."""
        self._require_bronze()
        started = time.monotonic()
        for table in ("daily_sessions", "daily_attempts", "daily_losses"):
            if not self.has("gold", table):
                raise InputError(f"no gold/{table} under {self.output}: run aggregate first")
        tables = ReportTables(
            sessions=self._silver("sessions"),
            events=self._silver("events"),
            attempts=self._silver("attempts"),
            generations=self._silver("generations"),
            daily_sessions=self.spark.read.parquet(self.path("gold", "daily_sessions")),
            daily_attempts=self.spark.read.parquet(self.path("gold", "daily_attempts")),
            daily_losses=self.spark.read.parquet(self.path("gold", "daily_losses")),
            mailboxes=self._mailbox("mailboxes"),
            nameplates=self._mailbox("nameplates"),
            transit=self._transit(),
            timing=self.read("bronze", "client_timing", schemas.CLIENT_TIMING),
        )
        with self.progress.step("report: summary"):
            summary = build_summary(
                tables.sessions,
                tables.events,
                tables.mailboxes,
                tables.nameplates,
                tables.transit,
                tables.timing,
                self.corrupt_lines(),
            )
        with self.progress.step("report: breakdowns"):
            data = collect(tables)
            summary.update(summary_extras(data))
            self._write_json(summary, "report", "summary.json")
        with self.progress.step("report: page"):
            html = render_html(summary, data, self._meta())
            storage.write_text(self.spark, self.path("report", "index.html"), html)
        self._stage_done("report", "report", started)
        self.progress.say(f"report written to {self.path('report', 'index.html')}")
        return summary

    def _meta(self) -> Meta:
        """The page header's facts: ingested inputs (``bronze/_stats``), versions, output."""
        from txdilation import __version__

        inputs = [
            InputInfo(
                source=source,
                location=str(stats.get("input", "")),
                rows=int(stats["rows"]),
                bad_lines=int(stats["bad_lines"]),
            )
            for source, stats in self.ingest_stats().items()
        ]
        return Meta(
            inputs=inputs,
            txdilation_version=__version__,
            spark=f"Spark {self.spark.version} ({self.spark.sparkContext.master})",
            output=self.output,
        )

    def analyze(self, inputs: Inputs) -> dict[str, Any]:
        """All four stages; returns the summary."""
        self.ingest(inputs)
        self.sessionize()
        self.aggregate()
        return self.report()


__all__ = ["SOURCES", "Inputs", "Pipeline", "Progress"]
