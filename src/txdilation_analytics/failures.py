"""Why a session did not dilate: one reason per undilated session, from its own events.

Layer: pure ``DataFrame -> DataFrame`` over silver tables (Spark built-ins only). The real
Manager ends every session with ``session_ended`` ``closed``, so the end reason alone says
little; the reason is the furthest step the session reached, first match wins:

1. no attempt and no ``please_received``: ``no_please``;
2. no attempt and no hint received: ``no_hints``;
3. no attempt: ``no_attempt``;
4. an attempt without an outcome and no ``session_ended``: ``connecting``;
5. an attempt ended ``handshake_failed``: ``handshake_failed``;
6. an attempt ended ``timeout``: ``timeout``;
7. an attempt ended ``connect_failed``: ``connect_failed``;
8. otherwise (every attempt cancelled, superseded or unfinished): ``abandoned``.

The session's own ``end_reason`` (``null`` when it never ended) is kept beside it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

REASONS: dict[str, str] = {
    "no_please": "the peer never answered the dilation request (no please): it does not "
    "dilate, or left before",
    "no_hints": "the peer answered but no connection hint arrived",
    "no_attempt": "hints arrived but no connection was attempted",
    "connecting": "still connecting when its log ends (attempts without outcome, no end)",
    "handshake_failed": "every attempt failed; one at least connected, then failed its "
    "handshake (relay line, Noise, KCM)",
    "timeout": "every attempt failed; one at least timed out (dial or handshake)",
    "connect_failed": "every attempt failed to connect (refused, unreachable)",
    "abandoned": "the wormhole closed while attempts were still running (cancelled)",
}
"""Reason -> one-line meaning, in the order the reasons are tested."""


def _has(outcome: str) -> Column:
    return F.col(f"_n_{outcome}") > 0


def undilated(sessions: DataFrame, attempts: DataFrame) -> DataFrame:
    """Silver sessions and attempts -> (session, day, reason, end_reason) for every session
    that never selected a connection (``please_received``/``hints_received`` are the
    session's own counts, from silver sessions)."""
    failed = sessions.filter(~F.col("dilated")).select(
        "session",
        "day",
        "ended",
        "end_reason",
        F.col("please_received").alias("_please"),
        F.col("hints_received").alias("_hints"),
    )
    outcomes = ("unfinished", "handshake_failed", "timeout", "connect_failed")
    tries = (
        attempts.join(failed.select("session"), "session", "left_semi")
        .groupBy("session")
        .agg(
            F.count(F.lit(1)).alias("_n"),
            *[F.count(F.when(F.col("outcome") == o, F.lit(1))).alias(f"_n_{o}") for o in outcomes],
        )
    )
    no_attempt = F.coalesce(F.col("_n"), F.lit(0)) == 0
    reason = (
        F.when(no_attempt & ~F.coalesce(F.col("_please"), F.lit(False)), "no_please")
        .when(no_attempt & (F.coalesce(F.col("_hints"), F.lit(0)) == 0), "no_hints")
        .when(no_attempt, "no_attempt")
        .when(_has("unfinished") & ~F.col("ended"), "connecting")
        .when(_has("handshake_failed"), "handshake_failed")
        .when(_has("timeout"), "timeout")
        .when(_has("connect_failed"), "connect_failed")
        .otherwise("abandoned")
    )
    return failed.join(tries, "session", "left").select(
        "session", "day", reason.alias("reason"), "end_reason"
    )


__all__ = ["REASONS", "undilated"]
