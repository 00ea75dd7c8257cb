"""Incremental ingest: what is new in the inputs, appended to bronze tables partitioned by day.

Layout: ``bronze/<table>/day=YYYY-MM-DD/*.parquet`` (``day``: the UTC day of the row's time, see
:data:`~.schemas.BRONZE_TABLES`; rows without one under ``day=__HIVE_DEFAULT_PARTITION__``) and
``bronze/_ingested.json``, the manifest: per source, every input file ingested (size,
modification time, rows, bad lines by reason, the days its rows are on; for a usage DB the last
``rowid`` read per table) and the patterns it was given as.

Invariants:

- nothing already ingested is read again: a file with the size and modification time it had
  when it was ingested is skipped, so ingesting the same file twice changes nothing; a usage DB
  is read from the row after the last one ingested (the servers only append rows);
- a file that changed since (a log still being written) is read again whole, and its earlier
  rows are removed: only the day partitions they were on are rewritten; a usage DB with fewer
  rows than were read from it was replaced, and is handled the same way;
- new rows are written to ``bronze/_staging`` first, counted there (per file, reason and day:
  a scan of the new rows only), then moved into the table; the manifest is replaced (atomically)
  last, so an interrupted ingest reads its files again next time (events read twice are
  dropped by ``sessionize``, which drops repeated ``seq`` values).
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any
from urllib.parse import unquote, urlparse

from . import bronze, schemas, sources, storage
from .inputs import Inputs, expand, is_remote, option_of
from .progress import Progress

MANIFEST = "_ingested.json"
MANIFEST_FORMAT = "txdilation-analytics-ingested/1"
NULL_DAY = "__HIVE_DEFAULT_PARTITION__"
"""The partition directory name Spark gives rows whose ``day`` is NULL."""

TABLES = {
    "events": ("events",),
    "transit_log": ("transit_log",),
    "client_timing": ("client_timing",),
    "mailbox_usage_db": tuple(t for t, _ in sources.MAILBOX_TABLES.values()),
    "transit_usage_db": ("transit_db",),
}
"""Source -> the bronze tables it fills."""


def _key(uri: str) -> str:
    """A file's identity in the manifest: local paths plain, other URIs as they are."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(unquote(parsed.path))
    return unquote(uri)


def _day_key(day: Any) -> str:
    return day.isoformat() if day is not None else NULL_DAY


def _with_day(df: Any, time_col: str) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("day", F.to_date(F.timestamp_seconds(F.col(time_col))))


class Manifest:
    """``bronze/_ingested.json``: what was ingested, per source and file."""

    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self.doc = doc or {"format": MANIFEST_FORMAT, "sources": {}}

    def source(self, source: str) -> dict[str, Any]:
        """The source's entry (``patterns`` and ``files``), created if missing."""
        entry: dict[str, Any] = self.doc["sources"].setdefault(
            source, {"patterns": [], "files": {}}
        )
        return entry

    def files(self, source: str) -> dict[str, dict[str, Any]]:
        """File key -> what was recorded when it was ingested."""
        files: dict[str, dict[str, Any]] = self.source(source)["files"]
        return files

    def totals(self) -> dict[str, dict[str, Any]]:
        """Per ingested source: rows, bad lines (and by reason), files and patterns."""
        out = {}
        for source, entry in self.doc["sources"].items():
            if not entry["files"]:
                continue
            reasons: dict[str, int] = {}
            for f in entry["files"].values():
                for reason, n in f.get("bad_by_reason", {}).items():
                    reasons[reason] = reasons.get(reason, 0) + n
            out[source] = {
                "rows": sum(f["rows"] for f in entry["files"].values()),
                "bad_lines": sum(reasons.values()),
                "bad_by_reason": dict(sorted(reasons.items())),
                "files": len(entry["files"]),
                "input": ", ".join(entry["patterns"]),
            }
        return out


def read_manifest(spark: Any, output: str) -> Manifest:
    """The manifest under ``output`` (empty when nothing was ingested there)."""
    path = storage.join(output, "bronze", MANIFEST)
    if not storage.exists(spark, path):
        return Manifest()
    return Manifest(json.loads(storage.read_text(spark, path)))


class Ingester:
    """One ``ingest`` run over one output directory."""

    def __init__(self, spark: Any, output: str, progress: Progress) -> None:
        self.spark = spark
        self.output = output
        self.progress = progress
        self.manifest = read_manifest(spark, output)

    def path(self, *parts: str) -> str:
        """A path under the output directory."""
        return storage.join(self.output, *parts)

    # --- the run ------------------------------------------------------------------------

    def run(self, inputs: Inputs) -> dict[str, dict[str, Any]]:
        """Ingest what is new in every given source; returns per source what this run did
        (``files_new``, ``files_changed``, ``files_skipped``, ``rows``, ``bad_lines``,
        ``days``). The manifest is written once, at the end."""
        stats: dict[str, dict[str, Any]] = {}
        for source, location in inputs.given().items():
            entry = self.manifest.source(source)
            if location not in entry["patterns"]:
                entry["patterns"].append(location)
            with self.progress.step(f"ingest {source} from {location}") as info:
                if source in ("mailbox_usage_db", "transit_usage_db"):
                    stats[source] = self._usage_db(source, location)
                else:
                    stats[source] = self._files(source, location)
                info["rows"] = stats[source]["rows"]
            if stats[source]["bad_lines"]:
                self.progress.say(
                    f"ingest {source}: {stats[source]['bad_lines']:,} bad lines "
                    f"({stats[source]['bad_by_reason']}), counted and skipped"
                )
        text = json.dumps(self.manifest.doc, indent=1, sort_keys=True) + "\n"
        storage.replace_text(self.spark, self.path("bronze", MANIFEST), text)
        return stats

    def _list(self, source: str, pattern: str) -> list[storage.FileInfo]:
        if not is_remote(pattern):
            out = []
            for path in expand(option_of(source), pattern):
                st = os.stat(path)
                out.append(storage.FileInfo(path, st.st_size, st.st_mtime_ns // 1_000_000))
            return out
        return storage.list_files(self.spark, pattern)

    # --- file sources: events, relay logs, client timing -----------------------------------

    def _files(self, source: str, pattern: str) -> dict[str, Any]:
        known = self.manifest.files(source)
        found = self._list(source, pattern)
        todo, changed = [], []
        for f in found:
            before = known.get(_key(f.path))
            if before is None:
                todo.append(f)
            elif (before["size"], before["mtime_ms"]) != (f.size, f.mtime_ms):
                todo.append(f)
                changed.append(before)
        result: dict[str, Any] = {
            "files_new": len(todo) - len(changed),
            "files_changed": len(changed),
            "files_skipped": len(found) - len(todo),
            "rows": 0,
            "bad_lines": 0,
            "bad_by_reason": {},
            "days": [],
        }
        if not todo:
            return result
        paths = [f.path for f in todo]
        (table,) = TABLES[source]
        extra_bad: dict[str, int] = {}
        if source == "events":
            df = bronze.validate_events(sources.read_events(self.spark, paths))
        elif source == "transit_log":
            df = bronze.validate_transit(sources.read_transit_log(self.spark, paths), "log")
        else:
            df, extra_bad = sources.read_client_timing(self.spark, paths)
        replace = {c["source_file"]: c["days"] for c in changed if c.get("source_file")}
        counted = self._append(table, df, replace)
        for f in todo:
            key = _key(f.path)
            rows = counted.get(key, {"rows": 0, "bad": {}, "days": set(), "source_file": f.path})
            bad = dict(rows["bad"])
            if extra_bad.get(f.path):
                bad["malformed"] = extra_bad[f.path]
            known[key] = {
                "size": f.size,
                "mtime_ms": f.mtime_ms,
                "rows": rows["rows"],
                "bad_by_reason": bad,
                "days": sorted(rows["days"]),
                "source_file": rows["source_file"],
                "ingested_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"
                ),
            }
            self._add(result, known[key])
        return result

    @staticmethod
    def _add(result: dict[str, Any], file: dict[str, Any]) -> None:
        result["rows"] += file["rows"]
        for reason, n in file["bad_by_reason"].items():
            result["bad_by_reason"][reason] = result["bad_by_reason"].get(reason, 0) + n
            result["bad_lines"] += n
        result["days"] = sorted(set(result["days"]) | set(file["days"]))

    # --- usage databases --------------------------------------------------------------------

    def _usage_db(self, source: str, location: str) -> dict[str, Any]:
        from pyspark.sql import types as T

        from .sqlite_source import max_rowid

        path = os.path.abspath(location)
        known = self.manifest.files(source)
        before = known.get(path)
        tables = sources.MAILBOX_TABLES if source == "mailbox_usage_db" else {
            "usage": ("transit_db", T.StructType([
                *schemas.TRANSIT_RAW.fields, T.StructField("source_file", T.StringType())
            ]))
        }  # fmt: skip
        upto = {t: max_rowid(path, t) for t in tables}
        done = before["rowids"] if before else {}
        replaced = any(upto[t] < done.get(t, 0) for t in tables)
        after = {t: 0 if replaced else done.get(t, 0) for t in tables}
        result: dict[str, Any] = {
            "files_new": int(before is None),
            "files_changed": int(replaced),
            "files_skipped": int(all(upto[t] == after[t] for t in tables)),
            "rows": 0,
            "bad_lines": 0,
            "bad_by_reason": {},
            "days": [],
        }
        if result["files_skipped"] and before is not None:
            return result
        st = os.stat(path)
        old: dict[str, Any] = before if before is not None and not replaced else {}
        entry: dict[str, Any] = {
            "size": st.st_size,
            "mtime_ms": st.st_mtime_ns // 1_000_000,
            "rows": old.get("rows", 0),
            "tables": dict(old.get("tables", {})),
            "rowids": upto,
            "bad_by_reason": dict(old.get("bad_by_reason", {})),
            "days": list(old.get("days", [])),
            "source_file": path,
            "ingested_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
        }
        for table, (bronze_table, schema) in tables.items():
            df = sources.read_usage_table(
                self.spark, path, table, schema, after=after[table], upto=upto[table]
            )
            if source == "transit_usage_db":
                df = bronze.validate_transit(df, "db")
            replace = {path: before["days"]} if replaced and before else {}
            counted = self._append(bronze_table, df, replace).get(path)
            if counted is None:
                continue
            entry["tables"][table] = entry["tables"].get(table, 0) + counted["rows"]
            entry["rows"] += counted["rows"]
            new = {"rows": counted["rows"], "bad_by_reason": counted["bad"],
                   "days": sorted(counted["days"])}  # fmt: skip
            self._add(result, new)
            for reason, n in counted["bad"].items():
                entry["bad_by_reason"][reason] = entry["bad_by_reason"].get(reason, 0) + n
            entry["days"] = sorted(set(entry["days"]) | counted["days"])
        known[path] = entry
        return result

    # --- appending to a partitioned table ---------------------------------------------------

    def _append(
        self, table: str, df: Any, replace: dict[str, list[str]]
    ) -> dict[str, dict[str, Any]]:
        """Append ``df`` to ``bronze/<table>`` (removing first the rows of the files in
        ``replace``: source_file -> the days they are on); returns per file key: ``rows``
        (good), ``bad`` (reason -> lines), ``days`` and ``source_file`` as stored."""
        from pyspark.sql import functions as F

        schema, time_col = schemas.BRONZE_TABLES[table]
        staging = self.path("bronze", "_staging", table)
        new = storage.join(staging, "new")
        storage.delete(self.spark, staging)
        _with_day(df, time_col).write.partitionBy("day").parquet(new)
        stored = self.spark.read.schema(schemas.dated(schema)).parquet(new)
        keys = ["source_file", "day"]
        if "bad_reason" in stored.columns:
            keys.append("bad_reason")
        counted: dict[str, dict[str, Any]] = {}
        for r in stored.groupBy(*keys).agg(F.count(F.lit(1)).alias("n")).collect():
            info = counted.setdefault(
                _key(r["source_file"]),
                {"rows": 0, "bad": {}, "days": set(), "source_file": r["source_file"]},
            )
            reason = r["bad_reason"] if "bad_reason" in keys else None
            if reason is None:
                info["rows"] += r["n"]
            else:
                info["bad"][reason] = info["bad"].get(reason, 0) + r["n"]
            info["days"].add(_day_key(r["day"]))
        target = self.path("bronze", table)
        if replace:
            self._remove(table, staging, replace)
        for part in storage.children(self.spark, new):
            if part.startswith("day="):
                storage.move_into(self.spark, storage.join(new, part), storage.join(target, part))
        storage.touch(self.spark, storage.join(target, "_SUCCESS"))
        storage.delete(self.spark, staging)
        return counted

    def _remove(self, table: str, staging: str, replace: dict[str, list[str]]) -> None:
        """Rewrite the day partitions holding rows of the files in ``replace`` without them."""
        from pyspark.sql import functions as F

        target = self.path("bronze", table)
        days = sorted({d for ds in replace.values() for d in ds})
        dates = [datetime.date.fromisoformat(d) for d in days if d != NULL_DAY]
        in_days = F.col("day").isin(dates)
        if NULL_DAY in days:
            in_days = in_days | F.col("day").isNull()
        kept = storage.join(staging, "kept")
        schema, _ = schemas.BRONZE_TABLES[table]
        (
            self.spark.read.schema(schemas.dated(schema))
            .parquet(target)
            .filter(in_days & ~F.col("source_file").isin(list(replace)))
            .write.partitionBy("day")
            .parquet(kept)
        )
        for day in days:
            storage.delete(self.spark, storage.join(target, f"day={day}"))
            part = storage.join(kept, f"day={day}")
            if storage.exists(self.spark, part):
                storage.move_into(self.spark, part, storage.join(target, f"day={day}"))


__all__ = ["MANIFEST", "TABLES", "Ingester", "Manifest", "read_manifest"]
