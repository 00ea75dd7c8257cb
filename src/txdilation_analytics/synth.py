"""Synthetic inputs at any scale: telemetry event logs plus matching server records.

Layer: test-data generator, written with Spark itself (no Python per row): one row per pair
from ``spark.range``, every random draw a hash of (seed, pair, side, draw number) so the
output depends only on the options (not on partitioning or timing); each peer's events are
built per generation as an array of structs (the periodic records with ``transform``), sorted
by ``ts``, exploded with a closed-form ``seq`` (no shuffle) and written as JSON text lines.

Model (per pair of peers; both peers log, leader first; N sessions = N peer logs):

- start uniform over ``days`` days; 3.5 % of pairs fail to connect (every dial fails);
- 22 % of the others are relayed (the direct dials fail first); time to dilate is lognormal,
  median 0.4 s direct, 1.5 s + lognormal(median 1.2 s) relayed;
- 1 to 4 generations (82 % / 13 % / 4 % / 1 %); per-generation uptime lognormal, median 45 s;
- bytes lognormal (median 300 kB leader, 50 kB follower); reconnects retransmit up to 25 % of
  a generation's bytes; RTT lognormal, median 20 ms direct, +30-40 ms relayed;
- the mailbox DB has one nameplate and one mailbox per pair plus 10 % other wormholes with
  mixed results; the relay log has one ``happy`` row per relayed generation, ``redundant``
  rows for 30 % of direct pairs, and ``lonely`` rows for failed pairs.

Events, in the real emitter's order (docs/telemetry.md; tests/analytics/test_synth.py checks
the shape against a real dilation's): ``dilation_requested`` and ``please_received`` without a
role; per generation one ``hints_sent`` and one ``hints_received`` record per hint type (each
peer offers 1 direct hint, 2 for 20 %, and the common relay); the race: our relay dial, one
dial per direct hint of the peer and, unless relayed or failed, the peer's dial into our
listener (``inbound``); the pair's winning direct connection is the Leader's dial or the
Follower's (half each), the other attempts end ``cancelled`` (the Leader's relay
``superseded`` when it was a held candidate, 30 %) right before ``connection_selected``;
relayed races end the direct dials ``timeout``/``connect_failed`` first; a ``ping_rtt`` every
30 s while connected (PONG after the RTT); ``connection_lost`` and, at once, ``reconnect``
(Leader) / ``reconnecting`` (Follower) between generations, and ``recovered`` right after the
next selection (``died``: the pair's path; ``noticed_by``: ``connection_closed`` for a
``network_error`` loss, else ``liveness``; ``gap_s``: from the loss to the selection, plus
1.65 ping intervals of silence before a ``liveness`` loss); periodic ``traffic`` every 60 s
from the first selection (cumulative counters interpolated over the session); one subchannel
(scid 1, opened by the Leader after the first selection, closed at the end); the graceful
close: ``subchannel_closed``, ``connection_lost`` ``closed``, the ``final`` traffic record and
``session_ended`` ``closed`` (the Manager's only end reason). A failed session ends after 30 s
with the final (zero) traffic record and no connection.

Outputs under ``OUT``: ``events/part-*.txt`` (JSON lines; ``part-*.txt.gz`` with
``--compress``), ``mailbox-usage.sqlite``
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
from pyspark.sql import types as T

from . import schemas
from .errors import InputError
from .inputs import is_remote

APP_ID = "lothar.com/wormhole/text-or-file-xfer"
HINT_TYPES = ("direct-tcp-v1", "relay-v1")
HINTS_TYPE = T.StructType([T.StructField(h, T.LongType()) for h in HINT_TYPES])
SESSIONS_PER_FILE = 50_000
GEN_START = 0.1
"""Seconds from dilation_requested to the first generation's hints."""
TRAFFIC_INTERVAL = 60.0
"""Seconds between periodic ``traffic`` records (the emitter's default)."""
PING_INTERVAL = 30.0
"""Seconds between PINGs on a connection (the Manager's default)."""
RECONNECT_DELAY = 1e-5
"""Seconds from a connection's loss to the reconnect (at once, but after it)."""
SILENT_BEFORE_LOSS = 1.65 * PING_INTERVAL
"""Seconds nothing was heard before a liveness (``timeout``) loss: 1.5 to 1.75 intervals."""
MAX_RTT = 0.9
"""Largest RTT sample (keeps a ping inside its connection's last second)."""
RECORD_BYTES = 16384
"""Payload bytes per DATA record in the record counts."""


@dataclass(frozen=True)
class SynthOptions:
    """What to generate. ``sessions`` counts peer logs (two per pair)."""

    sessions: int
    seed: int = 0
    days: int = 7
    start_date: str = "2026-01-05"
    files: int | None = None
    corrupt_rate: float = 0.0
    compress: bool = False

    def start_epoch(self) -> float:
        """Midnight UTC of ``start_date``.

        :raises InputError: not a YYYY-MM-DD date.
        """
        try:
            day = datetime.date.fromisoformat(self.start_date)
        except ValueError as e:
            raise InputError(f"--start-date: {e}") from e
        return datetime.datetime(
            day.year, day.month, day.day, tzinfo=datetime.timezone.utc
        ).timestamp()


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
            (1 + (d.u(16) < 0.2).cast("long")).alias("hints_l"),
            (1 + (d.u(17) < 0.2).cast("long")).alias("hints_f"),
            _hex16(F.lit(options.seed), F.col("pid"), F.lit("pair")).alias("pair"),
        )
    )
    return out


def _event(
    event: str | Column, ts: Column, generation: Column | None = None, **fields: Column | None
) -> Column:
    """One event struct with every telemetry field (typed NULL where not given), without seq.

    ``role`` is NULL on the first two events (the emitter does not know it yet). ``hints`` is
    a struct with one field per hint type (NULL fields are left out of the JSON, so the text is
    the emitter's map): a map would make the struct unorderable for ``sort_array``.
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
            kind = HINTS_TYPE if f.name == "hints" else f.dataType
            cols.append((F.lit(None) if value is None else value).cast(kind).alias(f.name))
    return F.struct(*cols)


def _hints(hint_type: str, n: Column) -> Column:
    """The ``hints`` of one record: ``n`` hints of one type (one record per type, like the
    emitter)."""
    return F.struct(*[(n if h == hint_type else F.lit(None)).alias(h) for h in HINT_TYPES])


def _one_to(count: Column) -> Column:
    """The array 1..count, empty when count < 1 (``sequence`` alone would count down)."""
    one = F.lit(1).cast("long")
    return F.when(count >= 1, F.sequence(one, count.cast("long"))).otherwise(
        F.array().cast("array<long>")
    )


def _ticks_before(t: Column) -> Column:
    """How many periodic ``traffic`` records have ``ts`` < ``t``: one every
    ``TRAFFIC_INTERVAL`` seconds after the first selection until the final record at
    ``t_stop``; none in a failed session."""
    c = F.col
    ticks = F.ceil((F.least(t, c("t_stop")) - c("first_sel")) / TRAFFIC_INTERVAL) - 1
    return F.when(c("failed"), F.lit(0)).otherwise(F.greatest(ticks, F.lit(0))).cast("long")


def _generation(g: Column, seed: int) -> Column:
    """The events of generation ``g`` (1-based) of one peer, in no particular order (the
    caller sorts them by ``ts`` and drops NULL entries): the reconnect that opened it, hints
    (one record per type, sent and received), the race's attempts, the selection, pings, and
    its loss unless it is the last (the final close is in the session's tail)."""
    c = F.col
    gs, ttd_g = c("gs"), c("ttd_g")
    tsel = gs + ttd_g

    def at(fraction: float) -> Column:
        return gs + ttd_g * fraction

    failed, relay = c("failed"), c("relay")
    first_id = c("attempts_per_gen") * (g - 1) + 1
    is_leader = c("role") == "leader"
    # which of the pair's two direct connections won: the same draw on both sides
    won_out = is_leader == (_Draws(seed, c("pid")).u(20, g) < 0.5)
    superseded = is_leader & (c("candidates") == 2) & ~relay & ~failed

    def attempt(
        n: Column,
        hint: str,
        direction: str,
        start: float,
        end: Column,
        outcome: Column,
        connect: Column | None,
        handshake: Column | None,
        exists: Column | None = None,
    ) -> list[Column]:
        """attempt_started and attempt_ended; durations are fractions of the time between."""
        span = end - at(start)
        ids = {"attempt": n, "hint_type": F.lit(hint), "direction": F.lit(direction)}
        started = _event("attempt_started", at(start), g, **ids)
        ended = _event(
            "attempt_ended",
            end,
            g,
            **ids,
            outcome=outcome,
            connect_s=None if connect is None else span * connect,
            handshake_s=None if handshake is None else span * handshake,
        )
        if exists is None:
            return [started, ended]
        return [F.when(exists, started), F.when(exists, ended)]

    direct_fail = F.when(c("direct_timed_out"), "timeout").otherwise("connect_failed")
    race = [
        *attempt(  # our dial of the relay, right after our hints went out
            first_id,
            "relay-v1",
            "outbound",
            0.07,
            F.when(failed, gs + 10.5).when(relay, at(0.997)).otherwise(at(0.999)),
            F.when(failed, "connect_failed")
            .when(relay, "selected")
            .when(superseded, "superseded")
            .otherwise("cancelled"),
            F.when(~failed, F.when(relay, 0.4).otherwise(0.3)),
            F.when(relay, 0.6).when(superseded, 0.5),
        ),
        *attempt(  # our dial of the peer's (first) direct hint
            first_id + 1,
            "direct-tcp-v1",
            "outbound",
            0.16,
            F.when(failed, gs + 10.0)
            .when(relay, at(0.8))
            .when(won_out, at(0.997))
            .otherwise(at(0.998)),
            F.when(failed, "timeout")
            .when(relay, direct_fail)
            .when(won_out, "selected")
            .otherwise("cancelled"),
            F.when(~failed & ~relay, F.when(won_out, 0.4).otherwise(0.3)),
            F.when(~failed & ~relay & won_out, 0.6),
        ),
        *attempt(  # our dial of the peer's second direct hint: an address we cannot reach
            first_id + 2,
            "direct-tcp-v1",
            "outbound",
            0.165,
            F.when(failed, gs + 10.2).when(relay, at(0.85)).otherwise(at(0.9985)),
            F.when(failed, "timeout").when(relay, direct_fail).otherwise("cancelled"),
            None,
            None,
            exists=c("their_hints") >= 2,
        ),
        *attempt(  # the peer's dial into our listener (never gets through when relayed)
            first_id + c("their_hints") + 1,
            "direct-tcp-v1",
            "inbound",
            0.3,
            F.when(won_out, at(0.998)).otherwise(at(0.997)),
            F.when(won_out, "cancelled").otherwise("selected"),
            F.lit(0.0),
            F.when(~won_out, 1.0),
            exists=~failed & ~relay,
        ),
    ]
    selected = _event(
        "connection_selected",
        tsel,
        g,
        hint_type=F.when(relay, "relay-v1").otherwise("direct-tcp-v1"),
        via_relay=relay,
        since_request_s=tsel - c("T"),
        candidates=F.when(superseded, F.lit(2)).otherwise(F.lit(1)),
    )
    d = _Draws(seed, c("pid"), c("side"), g)

    def rtt(n: Column) -> Column:
        return F.least(c("rtt") * F.exp(0.25 * d.normal(1, n)), F.lit(MAX_RTT))

    pings = F.transform(
        _one_to(c("pings")),
        lambda n: _event("ping_rtt", tsel + PING_INTERVAL * n + rtt(n), g, rtt_s=rtt(n)),
    )
    fixed = F.array(
        F.when(
            g > 1,
            _event(
                F.when(is_leader, "reconnect").otherwise("reconnecting"),
                c("recon"),
                g - 1,
            ),
        ),
        _event("hints_sent", at(0.04), g, hints=_hints("direct-tcp-v1", c("my_hints"))),
        _event("hints_sent", at(0.05), g, hints=_hints("relay-v1", F.lit(1))),
        _event("hints_received", at(0.14), g, hints=_hints("direct-tcp-v1", c("their_hints"))),
        _event("hints_received", at(0.17), g, hints=_hints("relay-v1", F.lit(1))),
        *race,
        F.when(~failed, selected),
        F.when(  # right after a reconnection's selection: what died, how noticed, the gap
            ~failed & (g > 1),
            _event(
                "recovered",
                tsel + RECONNECT_DELAY,
                g,
                died=F.when(relay, "relay").otherwise("direct"),
                noticed_by=F.when(c("lost_to_network"), "connection_closed").otherwise("liveness"),
                gap_s=tsel
                - (c("recon") - RECONNECT_DELAY)
                + F.when(c("lost_to_network"), 0.0).otherwise(SILENT_BEFORE_LOSS),
            ),
        ),
        F.when(
            ~failed & (g == 1),
            _event("subchannel_opened", tsel + 0.01, g, scid=F.lit(1), initiator=is_leader),
        ),
        F.when(
            ~failed & (g < c("G")),
            _event(
                "connection_lost",
                tsel + c("up"),
                g,
                reason=F.when(c("lost_to_network"), "network_error").otherwise("timeout"),
                uptime_s=c("up"),
            ),
        ),
    )
    return F.concat(fixed, pings)


def _periodic_traffic(g: Column) -> Column:
    """The periodic ``traffic`` records that fall into generation row ``g``'s time window
    (from its first event to the next row's first; counters interpolated over the session)."""
    c = F.col
    lo = _ticks_before(c("w_start")) + 1
    count = _ticks_before(c("w_end")) - lo + 1
    span = F.greatest(c("t_stop") - c("first_sel"), F.lit(1e-3))

    def record(n: Column) -> Column:
        ts = c("first_sel") + TRAFFIC_INTERVAL * (lo + n - 1)
        frac = (ts - c("first_sel")) / span
        sent = (c("my_sent") * frac).cast("long")
        recv = (c("my_recv") * frac).cast("long")
        return _event(
            "traffic",
            ts,
            F.when(ts < c("gs"), g - 1).otherwise(g),  # before the new generation's connector
            records_sent=sent / RECORD_BYTES + 1,
            bytes_sent=sent,
            records_acked=sent / RECORD_BYTES,
            bytes_retransmitted=(c("retrans") * (g - 1) / F.greatest(c("G") - 1, F.lit(1))),
            records_received=recv / RECORD_BYTES + 1,
            bytes_received=recv,
            queue_bytes=F.least(sent / 100, F.lit(1 << 20)),
            final=F.lit(False),
        )

    return F.transform(_one_to(count), record)


def _session_events(df: DataFrame, seed: int) -> DataFrame:
    """Per-peer rows -> one row per event with ``seq``, as JSON text (column ``value``).

    Peers are first exploded into one row per generation. A row's events (the session's first
    two in the first row, its last four in the last) are sorted by ``ts`` (every ``ts`` of a
    session is distinct by construction), so ``seq`` is the row's position plus the number of
    events in earlier rows, which is closed-form: every generation but the last has
    ``7 + 2 * attempts + pings`` fixed events, plus the periodic traffic records before the
    row's window (:func:`_ticks_before`).
    """
    c = F.col
    g = c("gen")
    later = c("ttd") * 0.6

    def reconnect_at(n: Column) -> Column:
        """When generation ``n`` >= 2 begins: just after the previous connection's loss (the
        same expression wherever used, so rows' time windows meet exactly)."""
        previous_loss = c("first_sel") + (n - 2) * (later + c("up") + c("rd")) + c("up")
        return previous_loss + RECONNECT_DELAY

    rows = (
        df.select("*", F.explode(F.sequence(F.lit(1).cast("long"), c("G"))).alias("gen"))
        .withColumn("ttd_g", F.when(g == 1, c("ttd")).otherwise(later))
        .withColumn("first_sel", c("T") + GEN_START + c("ttd"))
        .withColumn("recon", reconnect_at(g))
        .withColumn(  # rd after the previous loss, whose reconnect is RECONNECT_DELAY after it
            "gs",
            F.when(g == 1, c("T") + GEN_START).otherwise(c("recon") - RECONNECT_DELAY + c("rd")),
        )
        .withColumn(
            "t_end",
            F.when(c("failed"), c("T") + 30.0).otherwise(
                c("first_sel") + (c("G") - 1) * (later + c("up") + c("rd")) + c("up") + 0.01
            ),
        )
        .withColumn("t_close", c("t_end") + 0.005)
        .withColumn("t_stop", c("t_end") + 0.01)
        .withColumn("w_start", F.when(g == 1, c("T")).otherwise(c("recon")))
        .withColumn("w_end", F.when(g == c("G"), c("t_stop")).otherwise(reconnect_at(g + 1)))
    )
    first, last = g == 1, g == c("G")
    dilated = ~c("failed")
    records_sent = c("my_sent") / RECORD_BYTES + 1
    last_sel = c("gs") + c("ttd_g")

    def final(value: Column) -> Column:
        return F.when(c("failed"), 0).otherwise(value)

    head = F.array(
        F.when(first, _event("dilation_requested", c("T"))),
        F.when(first, _event("please_received", c("T") + 0.05)),
    )
    tail = F.array(
        F.when(
            last & dilated,
            _event(
                "subchannel_closed",
                c("t_end"),
                c("G"),
                scid=F.lit(1),
                bytes_in=c("my_recv"),
                bytes_out=c("my_sent"),
                duration_s=c("t_end") - (c("first_sel") + 0.01),
            ),
        ),
        F.when(  # the graceful close of the last connection
            last & dilated,
            _event(
                "connection_lost",
                c("t_close"),
                c("G"),
                reason=F.lit("closed"),
                uptime_s=c("t_close") - last_sel,
            ),
        ),
        F.when(
            last,
            _event(
                "traffic",
                c("t_stop"),
                c("G"),
                records_sent=final(records_sent),
                bytes_sent=final(c("my_sent")),
                records_acked=final(records_sent),
                bytes_retransmitted=final(c("retrans")),
                records_received=final(c("my_recv") / RECORD_BYTES + 1),
                bytes_received=final(c("my_recv")),
                queue_bytes=F.lit(0),
                final=F.lit(True),
            ),
        ),
        F.when(last, _event("session_ended", c("t_stop") + 0.01, c("G"), reason=F.lit("closed"))),
    )
    events = F.sort_array(
        F.array_compact(F.concat(head, _generation(g, seed), _periodic_traffic(g), tail))
    )
    per_gen = 7 + 2 * c("attempts_per_gen") + c("pings")
    recoveries_before = F.greatest(g - 2, F.lit(0))  # one ``recovered`` in each generation >= 2
    base = F.when(first, 0).otherwise(
        2 + per_gen * (g - 1) + recoveries_before + _ticks_before(c("w_start"))
    )
    exploded = rows.select(
        F.posexplode(events).alias("pos", "e"), "pid", "side", base.alias("base")
    ).withColumn("seq", c("base") + c("pos"))
    # the struct's JSON with "seq" (and a null "role", which to_json leaves out) put in front
    prefix = F.when(c("e.role").isNull(), F.lit('{"role":null,"seq":')).otherwise(F.lit('{"seq":'))
    text = F.concat(prefix, c("seq").cast("string"), F.lit(","), F.expr("substring(_j, 2)"))
    return exploded.withColumn("_j", F.to_json(c("e"))).select(text.alias("value"), "pid", "seq")


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
        .withColumn("my_hints", F.when(leader, c("hints_l")).otherwise(c("hints_f")))
        .withColumn("their_hints", F.when(leader, c("hints_f")).otherwise(c("hints_l")))
        .withColumn(  # our relay, each of the peer's direct hints, the peer's dial (unless relayed)
            "attempts_per_gen",
            1 + c("their_hints") + F.when(c("relay") | c("failed"), 0).otherwise(1),
        )
        .withColumn(  # a PING every interval while connected, none in the last second
            "pings",
            F.when(c("failed"), 0).otherwise(F.floor((c("up") - 1.0) / PING_INTERVAL)).cast("long"),
        )
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
    if is_remote(output):
        raise InputError("synth writes an SQLite file: --output must be a local directory")
    os.makedirs(output, exist_ok=True)
    files = options.files or max(1, math.ceil(options.sessions / SESSIONS_PER_FILE))
    events_dir = os.path.join(os.path.abspath(output), "events")
    with progress.step(f"synth: {options.sessions:,} sessions of events in {files} files"):
        writer = event_lines(spark, options, files).write.mode("overwrite")
        if options.compress:
            writer = writer.option("compression", "gzip")
        writer.text(events_dir)
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
