"""Synthetic inputs at any scale: telemetry event logs plus matching server records.

Layer: test-data generator, written with Spark itself (no Python per row): one row per pair
from ``spark.range``, every random draw a hash of (seed, pair, side, draw number) so the
output depends only on the options (not on partitioning or timing); events are built as arrays
of structs with higher-order functions, exploded and written as JSON text lines.

Model (per pair of peers; both peers log, leader first; N sessions = N peer logs):

- start uniform over ``days`` days; 3.5 % of pairs fail to connect (both attempts fail);
- 22 % of the others are relayed (the direct attempt fails first); time to dilate is lognormal,
  median 0.4 s direct, 1.5 s + lognormal(median 1.2 s) relayed;
- 1 to 4 generations (82 % / 13 % / 4 % / 1 %); per-generation uptime lognormal, median 45 s;
- bytes lognormal (median 300 kB leader, 50 kB follower); reconnects retransmit up to 25 % of
  a generation's bytes; RTT lognormal, median 20 ms direct, +30-40 ms relayed;
- the mailbox DB has one nameplate and one mailbox per pair plus 10 % other wormholes with
  mixed results; the relay log has one ``happy`` row per relayed generation, ``redundant``
  rows for 30 % of direct pairs, and ``lonely`` rows for failed pairs.

Outputs under ``OUT``: ``events/part-*.txt`` (JSON lines), ``mailbox-usage.sqlite``
(the server's usage-v2 tables) and ``transit.jsonl`` (the relay's ``--log-fd`` format).
"""

from __future__ import annotations

import datetime
import math
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import schemas, storage
from .errors import InputError

APP_ID = "lothar.com/wormhole/text-or-file-xfer"
HINTS = {"direct-tcp-v1": 2, "relay-v1": 1}
SESSIONS_PER_FILE = 50_000
GEN_START = 0.1
"""Seconds from dilation_requested to the first generation's hints."""


@dataclass(frozen=True)
class SynthOptions:
    """What to generate. ``sessions`` counts peer logs (two per pair)."""

    sessions: int
    seed: int = 0
    days: int = 7
    start_date: str = "2026-01-05"
    files: int | None = None
    corrupt_rate: float = 0.0

    def start_epoch(self) -> float:
        """Midnight UTC of ``start_date``.

        :raises InputError: not a YYYY-MM-DD date.
        """
        try:
            day = datetime.date.fromisoformat(self.start_date)
        except ValueError as e:
            raise InputError(f"--start-date: {e}") from e
        return datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC).timestamp()


class _Draws:
    """Deterministic uniform and normal draws keyed by (seed, key columns, draw number)."""

    def __init__(self, seed: int, *keys: Column) -> None:
        self._seed = seed
        self._keys = keys

    def u(self, k: int, *extra: Column) -> Column:
        """Uniform in [0, 1)."""
        h = F.xxhash64(F.lit(self._seed), *self._keys, *extra, F.lit(k))
        return F.pmod(h, F.lit(1 << 52)).cast("double") / float(1 << 52)

    def normal(self, k: int, *extra: Column) -> Column:
        """Standard normal (Box-Muller over two draws)."""
        radius = F.sqrt(-2.0 * F.log(1.0 - self.u(k, *extra)))
        return radius * F.cos(2 * math.pi * self.u(k + 1000, *extra))

    def lognormal(self, k: int, median: float, sigma: float, *extra: Column) -> Column:
        """Lognormal with the given median."""
        return F.exp(F.lit(math.log(median)) + sigma * self.normal(k, *extra))


def _hex16(*cols: Column) -> Column:
    return F.lpad(F.lower(F.hex(F.xxhash64(*cols))), 16, "0")


def pairs(spark: Any, options: SynthOptions, partitions: int) -> DataFrame:
    """One row per pair with every per-pair draw (the model's parameters)."""
    n_pairs = (options.sessions + 1) // 2
    d = _Draws(options.seed, F.col("pid"))
    failed = d.u(2) < 0.035
    relay = ~failed & (d.u(3) < 0.22)
    g = d.u(5)
    gens = F.when(failed, 1).when(g < 0.82, 1).when(g < 0.95, 2).when(g < 0.99, 3).otherwise(4)
    ttd = F.when(relay, 1.5 + d.lognormal(4, 1.2, 0.6)).otherwise(d.lognormal(4, 0.4, 0.7))
    rtt = F.when(relay, 0.03 + d.lognormal(10, 0.04, 0.4)).otherwise(d.lognormal(10, 0.02, 0.6))
    out: DataFrame = (
        spark.range(0, n_pairs, numPartitions=partitions)
        .withColumnRenamed("id", "pid")
        .select(
            "pid",
            (options.start_epoch() + d.u(1) * (options.days * 86400.0)).alias("t0"),
            failed.alias("failed"),
            relay.alias("relay"),
            gens.cast("long").alias("G"),
            ttd.alias("ttd"),
            F.least(F.greatest(d.lognormal(6, 45.0, 1.3), F.lit(1.0)), F.lit(86400.0)).alias("up"),
            (0.5 + 4 * d.u(7)).alias("rd"),
            F.least(d.lognormal(8, 300e3, 2.2), F.lit(2e10)).cast("long").alias("bytes_l"),
            F.least(d.lognormal(9, 50e3, 2.0), F.lit(2e10)).cast("long").alias("bytes_f"),
            rtt.alias("rtt"),
            (d.u(11) * 0.25).alias("retrans_frac"),
            (d.u(12) < 0.5).alias("direct_timed_out"),
            (0.05 + 0.3 * d.u(13)).alias("follower_delay"),
            F.when(d.u(14) < 0.3, 2).otherwise(1).cast("long").alias("candidates"),
            (d.u(15) < 0.6).alias("lost_to_network"),
            (d.u(16) < 0.9).alias("ends_happy"),
            _hex16(F.lit(options.seed), F.col("pid"), F.lit("pair")).alias("pair"),
        )
    )
    return out


def _event(
    event: str | Column, ts: Column, generation: Column | None = None, **fields: Column | None
) -> Column:
    """One event struct with every telemetry field (typed NULL where not given), without seq.

    ``role`` is NULL on the first two events (the emitter does not know it yet).
    """
    early = isinstance(event, str) and event in ("dilation_requested", "please_received")
    values = {
        "schema": F.lit(schemas.SCHEMA),
        "ts": ts,
        "event": F.lit(event) if isinstance(event, str) else event,
        "session": F.col("session"),
        "role": None if early else F.col("role"),
        "generation": generation,
        "pair": F.col("pair"),
        **fields,
    }
    cols = []
    for f in schemas.event_type().fields:
        if f.name != "seq":
            value = values.get(f.name)
            cols.append((F.lit(None) if value is None else value).cast(f.dataType).alias(f.name))
    return F.struct(*cols)


def _hints() -> Column:
    return F.create_map(*[x for k, v in HINTS.items() for x in (F.lit(k), F.lit(v))])


def _generation(g: Column, seed: int) -> Column:
    """The events of generation ``g`` (1-based) of one peer (NULL entries are dropped later)."""
    c = F.col
    later = c("ttd") * 0.6
    ttd_g = F.when(g == 1, c("ttd")).otherwise(later)
    gs = (
        c("T")
        + GEN_START
        + F.when(g == 1, 0.0).otherwise(
            c("ttd") + c("up") + c("rd") + (g - 2) * (later + c("up") + c("rd"))
        )
    )
    tsel = gs + ttd_g
    n_direct = (g - 1) * 2 + 1
    n_relay = n_direct + 1
    is_leader = c("role") == "leader"
    direction = F.when(is_leader, "outbound").otherwise("inbound")
    frac = (g.cast("double") - 0.5) / c("G")
    sent = (c("my_sent") * frac).cast("long")
    recv = (c("my_recv") * frac).cast("long")
    retrans = (c("retrans") * (g - 1) / F.greatest(c("G") - 1, F.lit(1))).cast("long")

    def attempt(
        n: Column, hint: str, dirn: Column, ts: Column, outcome: str | Column | None = None
    ) -> Column:
        """attempt_started (no outcome) or attempt_ended; a selected one has durations."""
        selected = isinstance(outcome, str) and outcome == "selected"
        return _event(
            "attempt_started" if outcome is None else "attempt_ended",
            ts,
            g,
            attempt=n,
            hint_type=F.lit(hint),
            direction=dirn,
            outcome=F.lit(outcome) if isinstance(outcome, str) else outcome,
            connect_s=ttd_g * 0.4 if selected else None,
            handshake_s=ttd_g * 0.5 if selected else None,
        )

    direct_fail = F.when(c("direct_timed_out"), "timeout").otherwise("connect_failed")
    direct_failed_end = attempt(n_direct, "direct-tcp-v1", direction, gs + ttd_g * 0.8, direct_fail)
    selected = _event(
        "connection_selected",
        tsel,
        g,
        hint_type=F.when(c("relay"), "relay-v1").otherwise("direct-tcp-v1"),
        via_relay=c("relay"),
        since_request_s=tsel - c("T"),
        candidates=F.when(c("relay"), F.lit(1)).otherwise(c("candidates")),
    )
    outbound = F.lit("outbound")
    race = F.when(
        c("relay"),
        F.array(
            direct_failed_end,
            attempt(n_relay, "relay-v1", outbound, tsel - 0.001, "selected"),
            selected,
        ),
    ).otherwise(
        F.array(
            attempt(n_direct, "direct-tcp-v1", direction, tsel - 0.001, "selected"),
            selected,
            attempt(n_relay, "relay-v1", outbound, tsel + 0.001, "cancelled"),
        )
    )
    failed_race = F.array(
        attempt(n_direct, "direct-tcp-v1", direction, gs + 10.0, "timeout"),
        attempt(n_relay, "relay-v1", outbound, gs + 10.5, "connect_failed"),
    )
    start = F.array(
        F.when(
            g > 1,
            _event(
                F.when(is_leader, "reconnect").otherwise("reconnecting"),
                gs - c("rd") * 0.5,
                g - 1,
            ),
        ),
        _event("hints_sent", gs + 0.01, g, hints=_hints()),
        _event("hints_received", gs + 0.02, g, hints=_hints()),
        attempt(n_direct, "direct-tcp-v1", direction, gs + 0.03),
        attempt(n_relay, "relay-v1", outbound, gs + 0.05),
    )
    d = _Draws(seed, F.col("pid"), F.col("side"), g)
    after = F.array(
        F.when(
            g == 1,
            _event("subchannel_opened", tsel + 0.01, g, scid=F.lit(1), initiator=is_leader),
        ),
        _event("ping_rtt", tsel + c("up") * 0.3, g, rtt_s=c("rtt") * F.exp(0.25 * d.normal(1))),
        _event(
            "traffic",
            tsel + c("up") * 0.6,
            g,
            records_sent=sent / 16384 + 1,
            bytes_sent=sent,
            records_acked=sent / 16384,
            bytes_retransmitted=retrans,
            records_received=recv / 16384 + 1,
            bytes_received=recv,
            queue_bytes=F.least(sent / 100, F.lit(1 << 20)),
            final=F.lit(False),
        ),
        F.when(
            g < c("G"),
            _event(
                "connection_lost",
                tsel + c("up"),
                g,
                reason=F.when(c("lost_to_network"), "network_error").otherwise("timeout"),
                uptime_s=c("up"),
            ),
        ),
    )
    return F.when(c("failed"), F.concat(start, failed_race)).otherwise(F.concat(start, race, after))


def _session_events(df: DataFrame, seed: int) -> DataFrame:
    """Per-peer rows -> one row per event with ``seq``, as JSON text (column ``value``).

    Peers are first exploded into one row per generation (plain, code-generated expressions;
    no per-row lambdas except the NULL filter). The first generation row also carries the
    session's first two events, the last one its final three. A generation has 11 events
    (hints x2, attempts x4, selection, ping, traffic, loss, and the opening subchannel or the
    reconnect), the last one no loss, so generation ``g`` starts at seq 2 + 11 (g - 1).
    """
    c = F.col
    rows = df.select("*", F.explode(F.sequence(F.lit(1).cast("long"), c("G"))).alias("gen"))
    g = c("gen")
    first, last = g == 1, g == c("G")
    last_sel = c("T") + GEN_START + c("ttd") + (c("G") - 1) * (c("ttd") * 0.6 + c("up") + c("rd"))
    t_end = F.when(c("failed"), c("T") + 30.0).otherwise(last_sel + c("up") + 0.01)
    records_sent = c("my_sent") / 16384 + 1
    head = F.array(
        F.when(first, _event("dilation_requested", c("T"))),
        F.when(first, _event("please_received", c("T") + 0.05)),
    )
    tail = F.array(
        F.when(
            last & ~c("failed"),
            _event(
                "subchannel_closed",
                t_end,
                c("G"),
                scid=F.lit(1),
                bytes_in=c("my_recv"),
                bytes_out=c("my_sent"),
                duration_s=t_end - (c("T") + GEN_START + c("ttd") + 0.01),
            ),
        ),
        F.when(
            last,
            _event(
                "traffic",
                t_end + 0.01,
                c("G"),
                records_sent=F.when(c("failed"), 0).otherwise(records_sent),
                bytes_sent=F.when(c("failed"), 0).otherwise(c("my_sent")),
                records_acked=F.when(c("failed"), 0).otherwise(records_sent),
                bytes_retransmitted=F.when(c("failed"), 0).otherwise(c("retrans")),
                records_received=F.when(c("failed"), 0).otherwise(c("my_recv") / 16384 + 1),
                bytes_received=F.when(c("failed"), 0).otherwise(c("my_recv")),
                queue_bytes=F.lit(0),
                final=F.lit(True),
            ),
        ),
        F.when(
            last,
            _event(
                "session_ended",
                t_end + 0.02,
                c("G"),
                reason=F.when(c("failed"), "failed")
                .when(c("ends_happy"), "happy")
                .otherwise("closed"),
            ),
        ),
    )
    events = F.filter(F.concat(head, _generation(g, seed), tail), lambda e: e.isNotNull())
    base = F.when(first, 0).otherwise(2 + 11 * (g - 1))
    exploded = rows.select(
        F.posexplode(events).alias("pos", "e"), "pid", "side", base.alias("base")
    ).withColumn("seq", c("base") + c("pos"))
    fields = [f.name for f in schemas.event_type().fields]
    ordered = F.struct(*[(c("seq") if n == "seq" else c(f"e.{n}")).alias(n) for n in fields])
    text = F.when(
        c("e.role").isNull(), F.concat(F.lit('{"role":null,'), F.expr("substring(_j, 2)"))
    ).otherwise(c("_j"))
    return exploded.withColumn("_j", F.to_json(ordered)).select(text.alias("value"), "pid", "seq")


def peers(pair_rows: DataFrame, sessions: int, seed: int) -> DataFrame:
    """Pairs -> one row per peer log (the last pair has only a leader when N is odd)."""
    c = F.col
    n_pairs = (sessions + 1) // 2
    out = pair_rows.withColumn("side", F.explode(F.array(F.lit(0), F.lit(1))))
    if sessions % 2:
        out = out.filter(~((c("pid") == n_pairs - 1) & (c("side") == 1)))
    leader = c("side") == 0
    return (
        out.withColumn("role", F.when(leader, "leader").otherwise("follower"))
        .withColumn("session", _hex16(F.lit(seed), c("pid"), c("side"), F.lit("session")))
        .withColumn("T", c("t0") + F.when(leader, 0.0).otherwise(c("follower_delay")))
        .withColumn("my_sent", F.when(leader, c("bytes_l")).otherwise(c("bytes_f")))
        .withColumn("my_recv", F.when(leader, c("bytes_f")).otherwise(c("bytes_l")))
        .withColumn(
            "retrans",
            F.when(
                c("G") > 1,
                (c("my_sent") / c("G") * c("retrans_frac") * (c("G") - 1)).cast("long"),
            ).otherwise(F.lit(0).cast("long")),
        )
    )


def event_lines(spark: Any, options: SynthOptions, partitions: int) -> DataFrame:
    """The synthetic telemetry as JSON text lines (column ``value``), corrupted at the rate."""
    peer_rows = peers(pairs(spark, options, partitions), options.sessions, options.seed)
    lines = _session_events(peer_rows, options.seed)
    if options.corrupt_rate > 0:
        d = _Draws(options.seed, F.col("pid"), F.col("seq"))
        broken = F.expr("substring(value, 1, CAST(length(value) / 2 AS INT))")
        lines = lines.withColumn(
            "value", F.when(d.u(99) < options.corrupt_rate, broken).otherwise(F.col("value"))
        )
    return lines.select("value")


def transit_lines(pair_rows: DataFrame, seed: int) -> DataFrame:
    """The relay's ``--log-fd`` lines for the pairs (column ``value``)."""
    c = F.col
    d = _Draws(seed, c("pid"))
    gen = F.explode(F.sequence(F.lit(1).cast("long"), c("G"))).alias("gen_no")
    relayed = pair_rows.filter(c("relay")).select("*", gen)
    happy = relayed.select(
        (c("t0") + (c("gen_no") - 1) * (c("ttd") + c("up") + c("rd")) + 1.4).alias("started"),
        (c("up") + c("ttd") * 0.3).alias("total_time"),
        (0.002 + 0.01 * d.u(30, c("gen_no"))).alias("waiting_time"),
        ((c("bytes_l") + c("bytes_f")) / c("G")).cast("long").alias("total_bytes"),
        F.lit("happy").alias("mood"),
    )
    redundant = pair_rows.filter(~c("relay") & ~c("failed") & (d.u(31) < 0.3)).select(
        (c("t0") + 0.06).alias("started"),
        (c("ttd") + 0.01).alias("total_time"),
        F.lit(None).cast("double").alias("waiting_time"),
        F.lit(0).cast("long").alias("total_bytes"),
        F.lit("redundant").alias("mood"),
    )
    lonely = pair_rows.filter(c("failed")).select(
        (c("t0") + 0.06).alias("started"),
        F.lit(30.0).alias("total_time"),
        F.lit(None).cast("double").alias("waiting_time"),
        F.lit(0).cast("long").alias("total_bytes"),
        F.lit("lonely").alias("mood"),
    )
    rows = happy.unionByName(redundant).unionByName(lonely)
    options = {"ignoreNullFields": "false"}
    return rows.orderBy("started").select(
        F.to_json(F.struct(*rows.columns), options).alias("value")
    )


def mailbox_rows(spark: Any, pair_rows: DataFrame, options: SynthOptions) -> dict[str, Any]:
    """pandas frames for the usage DB tables: nameplates, mailboxes, client_versions."""
    c = F.col
    d = _Draws(options.seed, c("pid"))
    extra_n = max(options.sessions // 20, 1)
    extra = spark.range(0, extra_n, numPartitions=1).withColumnRenamed("id", "pid")
    de = _Draws(options.seed + 1, c("pid"))
    r = de.u(40)
    extra_result = (
        F.when(r < 0.55, "happy")
        .when(r < 0.8, "lonely")
        .when(r < 0.9, "scary")
        .when(r < 0.97, "errory")
        .when(r < 0.99, "pruney")
        .otherwise("crowded")
    )
    t_end_pair = c("t0") + c("ttd") + c("G") * (c("up") + c("rd")) + 1.0
    boxes = pair_rows.select(
        F.lit(APP_ID).alias("app_id"),
        F.lit(1).alias("for_nameplate"),
        (c("t0") - 3.0 - d.u(41)).alias("started"),
        (t_end_pair - c("t0") + 4.0).alias("total_time"),
        (0.5 + 3 * d.u(42)).alias("waiting_time"),
        F.when(c("failed") & (d.u(43) < 0.5), "errory").otherwise("happy").alias("result"),
    ).unionByName(
        extra.select(
            F.lit(APP_ID).alias("app_id"),
            F.lit(1).alias("for_nameplate"),
            (options.start_epoch() + de.u(44) * options.days * 86400.0).alias("started"),
            (1.0 + 60 * de.u(45)).alias("total_time"),
            F.when(extra_result == "lonely", F.lit(None))
            .otherwise(5 * de.u(46))
            .alias("waiting_time"),
            extra_result.alias("result"),
        )
    )
    boxes_pd: Any = boxes.toPandas()
    plates = boxes_pd[["app_id", "started", "waiting_time", "total_time", "result"]].copy()
    plates["total_time"] = plates["total_time"].clip(upper=5.0)
    plates["result"] = plates["result"].map(
        lambda x: x if x in ("happy", "lonely", "pruney", "crowded") else "happy"
    )
    versions = (
        pair_rows.select("pid", "t0")
        .withColumn("side", F.explode(F.array(F.lit(0), F.lit(1))))
        .select(
            F.lit(APP_ID).alias("app_id"),
            F.substring(
                _hex16(F.lit(options.seed), c("pid"), c("side"), F.lit("side")), 1, 10
            ).alias("side"),
            (c("t0") - 4.0).alias("connect_time"),
            F.lit("python").alias("implementation"),
            F.lit("0.24.0").alias("version"),
        )
        .toPandas()
    )
    return {"nameplates": plates, "mailboxes": boxes_pd, "client_versions": versions}


USAGE_DDL = """
CREATE TABLE version (version INTEGER);
CREATE TABLE current (rebooted INTEGER, updated INTEGER, blur_time INTEGER,
                      connections_websocket INTEGER);
CREATE TABLE nameplates (app_id VARCHAR, started INTEGER, waiting_time INTEGER,
                         total_time INTEGER, result VARCHAR);
CREATE TABLE mailboxes (app_id VARCHAR, for_nameplate BOOLEAN, started INTEGER,
                        total_time INTEGER, waiting_time INTEGER, result VARCHAR);
CREATE TABLE client_versions (app_id VARCHAR, side VARCHAR, connect_time INTEGER,
                              implementation VARCHAR, version VARCHAR);
INSERT INTO version (version) VALUES (2);
"""
"""The mailbox server's usage-v2 tables (INTEGER-declared, REAL-valued, like the server)."""


def write_usage_db(path: str, tables: dict[str, Any]) -> dict[str, int]:
    """Create the SQLite usage DB at ``path`` (replacing it) from pandas frames per table."""
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    try:
        db.executescript(USAGE_DDL)
        counts = {}
        for table, frame in tables.items():
            cols = list(frame.columns)
            rows = [
                tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row)
                for row in frame.itertuples(index=False, name=None)
            ]
            db.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                rows,
            )
            counts[table] = len(rows)
        db.commit()
    finally:
        db.close()
    return counts


def synthesize(spark: Any, output: str, options: SynthOptions, progress: Any) -> dict[str, Any]:
    """Write events, mailbox usage DB and transit log for ``options`` under ``output``.

    :returns: paths written and row counts.
    :raises InputError: bad options, or a remote output (the SQLite file must be local).
    """
    if not 0 <= options.corrupt_rate < 1:
        raise InputError("--corrupt-rate must be in [0, 1)")
    if storage.is_remote(output):
        raise InputError("synth writes an SQLite file: --output must be a local directory")
    os.makedirs(output, exist_ok=True)
    files = options.files or max(1, math.ceil(options.sessions / SESSIONS_PER_FILE))
    events_dir = os.path.join(os.path.abspath(output), "events")
    with progress.step(f"synth: {options.sessions:,} sessions of events in {files} files"):
        event_lines(spark, options, files).write.mode("overwrite").text(events_dir)
    pair_rows = pairs(spark, options, max(1, min(files, 8))).cache()
    try:
        db_path = os.path.join(output, "mailbox-usage.sqlite")
        with progress.step("synth: mailbox usage DB") as info:
            counts = write_usage_db(db_path, mailbox_rows(spark, pair_rows, options))
            info["rows"] = sum(counts.values())
        transit_path = os.path.join(output, "transit.jsonl")
        with progress.step("synth: transit relay log") as info:
            frame: Any = transit_lines(pair_rows, options.seed).toPandas()
            with open(transit_path, "w", encoding="utf-8") as f:
                for line in frame["value"]:
                    f.write(line + "\n")
            info["rows"] = len(frame)
    finally:
        pair_rows.unpersist()
    return {
        "events": events_dir,
        "mailbox_usage_db": db_path,
        "transit_log": transit_path,
        "sessions": options.sessions,
        "pairs": (options.sessions + 1) // 2,
        "mailbox_rows": counts,
        "transit_rows": len(frame),
    }


__all__ = ["SynthOptions", "event_lines", "pairs", "peers", "synthesize", "write_usage_db"]
