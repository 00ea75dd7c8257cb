"""The four stages, wiring readers, pure transforms and Parquet under one output directory.

Layout under ``OUT`` (every table typed Parquet, timestamps DOUBLE Unix seconds)::

    bronze/events  mailbox_nameplates  mailbox_mailboxes  mailbox_client_versions
           transit_log  transit_db  client_timing  (each /day=YYYY-MM-DD/)
           _ingested.json  _stage.json
    silver/events  attempts  generations  sessions                           _stage.json
    gold/daily_sessions  daily_attempts  daily_losses  daily_mailboxes  daily_nameplates
         daily_transit                                                     _stage.json
    report/summary.json  index.html                                          _stage.json

Invariants: ``ingest`` appends what is new in the sources it is given and keeps everything
else (:mod:`.ingest`; so the SQLite files can be ingested on the host that owns them and the
event logs on a cluster, into the same shared ``OUT``); ``sessionize`` builds silver from the
bronze days asked for (all by default, see :class:`~.inputs.DayRange`) and the later stages
read silver, so the whole run covers those days; a later stage reads a table only if its
``_SUCCESS`` marker exists, and treats a missing table as empty; bad lines are counted in the
manifest, never fatal. Each stage's ``_stage.json`` records its seconds, wall-clock start and
end, master, Spark version, profile (:mod:`.session`) and what it returned.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from . import bronze, gold, quantiles, schemas, silver, storage
from .errors import InputError
from .ingest import MANIFEST, Ingester, read_manifest
from .inputs import SOURCES, DayRange, Inputs
from .progress import Progress
from .report import InputInfo, Meta, render_html
from .report_data import ReportTables, collect, summary_extras
from .session import PROFILE_KEY
from .summary import MAPPING_KEYS, PATH_TIME_KEYS, build_summary

MAILBOX_TABLES = {
    "nameplates": "mailbox_nameplates",
    "mailboxes": "mailbox_mailboxes",
    "client_versions": "mailbox_client_versions",
}


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

    def bronze(self, table: str, days: DayRange | None = None) -> Any:
        """A bronze table (with its ``day`` column), only the partitions of ``days`` if
        given; empty if never written."""
        from pyspark.sql import functions as F

        schema = schemas.dated(schemas.BRONZE_TABLES[table][0])
        if not self.has("bronze", table):
            return self.spark.createDataFrame([], schema)
        df = self.spark.read.schema(schema).parquet(self.path("bronze", table))
        if days is not None and days.first is not None:
            df = df.filter(F.col("day") >= F.lit(days.first))
        if days is not None and days.last is not None:
            df = df.filter(F.col("day") <= F.lit(days.last))
        return df

    def write(self, df: Any, layer: str, table: str, partitions: int | None = None) -> int:
        """Overwrite a table with ``df``; returns its row count (observed while writing)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if partitions is not None:
            df = df.coalesce(partitions)
        rows = Observation(f"{layer}.{table}")
        df.observe(rows, F.count(F.lit(1)).alias("rows")).write.mode("overwrite").parquet(
            self.path(layer, table)
        )
        return int(rows.get["rows"])

    def _write_json(self, obj: Any, *parts: str) -> None:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
        storage.write_text(self.spark, self.path(*parts), text)

    def _read_json(self, *parts: str) -> Any:
        return json.loads(storage.read_text(self.spark, self.path(*parts)))

    def stage_record(self, layer: str) -> dict[str, Any] | None:
        """``<layer>/_stage.json`` (None when the stage never ran)."""
        if not storage.exists(self.spark, self.path(layer, "_stage.json")):
            return None
        record: dict[str, Any] = self._read_json(layer, "_stage.json")
        return record

    def _stage_done(
        self, layer: str, stage: str, started: tuple[float, float], result: Any
    ) -> None:
        self._write_json(
            {
                "stage": stage,
                "seconds": round(time.monotonic() - started[0], 3),
                "started_at": round(started[1], 3),
                "ended_at": round(time.time(), 3),
                "master": self.spark.sparkContext.master,
                "spark_version": self.spark.version,
                "profile": self.spark.conf.get(PROFILE_KEY, "default"),
                "result": result,
            },
            layer,
            "_stage.json",
        )

    # --- ingest ------------------------------------------------------------------------

    def ingest(self, inputs: Inputs) -> dict[str, dict[str, Any]]:
        """Append what is new in the given sources to the bronze tables (:mod:`.ingest`);
        returns per source what this run read.

        :raises InputError: no input given, or an input is missing or malformed.
        """
        inputs.check()
        started = time.monotonic(), time.time()
        stats = Ingester(self.spark, self.output, self.progress).run(inputs)
        self._stage_done("bronze", "ingest", started, stats)
        return stats

    def ingest_stats(self) -> dict[str, dict[str, Any]]:
        """Per ingested source, over everything ingested: rows, bad lines (and by reason),
        files and the patterns given (from ``bronze/_ingested.json``)."""
        return read_manifest(self.spark, self.output).totals()

    def corrupt_lines(self) -> dict[str, int]:
        """Bad lines per ingested source."""
        return {source: int(s["bad_lines"]) for source, s in self.ingest_stats().items()}

    def _require_bronze(self) -> None:
        if not storage.exists(self.spark, self.path("bronze", MANIFEST)):
            raise InputError(f"no bronze tables under {self.output}: run ingest first")

    # --- sessionize --------------------------------------------------------------------

    def sessionize(self, days: DayRange | None = None) -> dict[str, Any]:
        """bronze/events -> silver/events, attempts, generations, sessions; returns row counts.

        :param days: only the sessions requested on these days (see :class:`DayRange`).
        """
        self._require_bronze()
        days = days or DayRange()
        started = time.monotonic(), time.time()
        counts: dict[str, Any] = {}
        events = bronze.good(self.bronze("events", days.widened()))
        if days.first is not None or days.last is not None:
            events = silver.requested_in(events, days.first, days.last)
        with self.progress.step("sessionize: ordering events per session") as info:
            counts["events"] = info["rows"] = self.write(
                silver.sessionize(events), "silver", "events"
            )
        ordered = self.spark.read.parquet(self.path("silver", "events"))
        for name, transform in (
            ("pings", silver.pings),
            ("attempts", silver.attempts),
            ("generations", silver.generations),
        ):
            with self.progress.step(f"sessionize: {name}") as info:
                counts[name] = info["rows"] = self.write(transform(ordered), "silver", name)
        gens = self.spark.read.parquet(self.path("silver", "generations"))
        with self.progress.step("sessionize: sessions") as info:
            counts["sessions"] = info["rows"] = self.write(
                silver.sessions(ordered, gens), "silver", "sessions"
            )
        counts["days"] = days.as_dict()
        self._stage_done("silver", "sessionize", started, counts)
        return counts

    def days(self) -> DayRange:
        """The days the silver tables were built for (all when no range was asked for)."""
        record = self.stage_record("silver")
        if record is None or not isinstance(record.get("result"), dict):
            return DayRange()
        return DayRange.from_dict(record["result"].get("days"))

    def _silver(self, table: str) -> Any:
        if not self.has("silver", table):
            raise InputError(f"no silver/{table} under {self.output}: run sessionize first")
        return self.spark.read.parquet(self.path("silver", table))

    def _transit(self) -> Any:
        days = self.days()
        log = self.bronze("transit_log", days)
        db = self.bronze("transit_db", days)
        return bronze.transit_usage(log.unionByName(db))

    def _mailbox(self, table: str) -> Any:
        return self.bronze(MAILBOX_TABLES[table], self.days())

    # --- aggregate ---------------------------------------------------------------------

    def aggregate(self) -> dict[str, int]:
        """silver (and bronze server tables) -> gold daily tables; returns row counts."""
        self._require_bronze()
        started = time.monotonic(), time.time()
        tables: dict[str, Callable[[], Any]] = {
            "daily_sessions": lambda: gold.daily_sessions(
                self._silver("sessions"), self._silver("pings")
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
                # repartition, not coalesce: the aggregation itself stays parallel
                table = build().repartition(1).sortWithinPartitions(*gold.ORDER[name])
                counts[name] = info["rows"] = self.write(table, "gold", name)
        self._stage_done("gold", "aggregate", started, counts)
        return counts

    # --- report ------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """-> report/summary.json and report/index.html; returns the summary."""
        self._require_bronze()
        started = time.monotonic(), time.time()
        for table in ("daily_sessions", "daily_attempts", "daily_losses"):
            if not self.has("gold", table):
                raise InputError(f"no gold/{table} under {self.output}: run aggregate first")
        tables = ReportTables(
            sessions=self._silver("sessions"),
            events=self._silver("events"),
            pings=self._silver("pings"),
            attempts=self._silver("attempts"),
            generations=self._silver("generations"),
            daily_sessions=self.spark.read.parquet(self.path("gold", "daily_sessions")),
            daily_attempts=self.spark.read.parquet(self.path("gold", "daily_attempts")),
            daily_losses=self.spark.read.parquet(self.path("gold", "daily_losses")),
            mailboxes=self._mailbox("mailboxes"),
            nameplates=self._mailbox("nameplates"),
            transit=self._transit(),
            timing=self.bronze("client_timing", self.days()),
        )
        days = self.days()
        record = self.stage_record("silver") or {}
        events = int((record.get("result") or {}).get("events", 0))
        large = events >= quantiles.LARGE_ROWS
        with self.progress.step("report: summary"):
            summary = build_summary(
                tables.sessions,
                tables.pings,
                tables.mailboxes,
                tables.nameplates,
                tables.transit,
                tables.timing,
                self.corrupt_lines(),
                quantiles.bracketed if large else None,
            )
        with self.progress.step("report: breakdowns"):
            data = collect(tables, large=large)
            summary.update(summary_extras(data))
            summary["range"] = days.as_dict()
            for key in (*PATH_TIME_KEYS, *MAPPING_KEYS):  # after the earlier keys
                summary[key] = summary.pop(key)
            self._write_json(summary, "report", "summary.json")
        with self.progress.step("report: page"):
            html = render_html(summary, data, self._meta(days))
            storage.write_text(self.spark, self.path("report", "index.html"), html)
        self._stage_done("report", "report", started, {"sessions": summary["sessions"]})
        self.progress.say(f"report written to {self.path('report', 'index.html')}")
        return summary

    def _meta(self, days: DayRange) -> Meta:
        """The page header's facts: ingested inputs (the manifest), versions, output, days."""
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
            selected=days.describe(),
        )

    def analyze(self, inputs: Inputs | None, days: DayRange | None = None) -> dict[str, Any]:
        """All four stages (without inputs: the three after ingest, over what was ingested
        before); returns the summary."""
        if inputs is not None:
            self.ingest(inputs)
        self.sessionize(days)
        self.aggregate()
        return self.report()


__all__ = ["SOURCES", "DayRange", "Inputs", "Pipeline", "Progress"]
