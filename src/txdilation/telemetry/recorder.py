"""The telemetry of one dilated wormhole: :class:`Telemetry`, one method per event, each building
one record (``txdilation.telemetry`` states the schema's rules) and handing it to the log, the
file and the sink (its traffic records' counters and schedule are ``telemetry.traffic``'s).

Each record's envelope, the context it carries and its destinations are
``telemetry.stream.RecordStream``'s; time comes from the ``IReactorTime`` passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twisted.internet.interfaces import IReactorTime

from txdilation._version import IMPLEMENTATION, __version__
from txdilation.settings import TelemetrySettings
from txdilation.telemetry.causes import LOST_REASON, NOTICED_BY_CAUSE
from txdilation.telemetry.stream import RecordStream
from txdilation.telemetry.traffic import PeriodicTraffic, TrafficStats, traffic_fields
from txdilation.telemetry.vocabulary import (
    ATTEMPT_OUTCOMES,
    DIRECTIONS,
    END_REASONS,
    HINT_TYPES,
    LOST_REASONS,
    MAPPING_CHANGES,
    MAPPING_PROTOCOLS,
    NOTICED_BY,
    PATH_CHANGE_REASONS,
    PATHS,
    RELAY_TRANSPORTS,
    Record,
    as_count,
    as_duration,
    as_hint_counts,
    vocabulary,
)
from txdilation.wire.reasons import Cause


class Telemetry(RecordStream):
    """The telemetry of one dilated wormhole, as seen by one peer.

    Construct one per ``dilate()`` call; call :meth:`set_role`, :meth:`set_pair` and
    :meth:`set_generation` as those become known, and one method per event. All methods
    return None and are cheap; none does network I/O.
    """

    def _begin(self) -> None:
        """The event state of one wormhole (the parameters: :class:`RecordStream`)."""
        self._requested_at: float | None = None
        self._selected_at: float | None = None
        self._periodic = PeriodicTraffic(
            self._clock, lambda stats: self._emit_traffic(stats, False)
        )
        self._traffic_source: Callable[[], TrafficStats] | None = None
        self._next_attempt = 1
        self._subchannels_opened_at: dict[int, float] = {}

    @classmethod
    def from_settings(cls, clock: IReactorTime, settings: TelemetrySettings) -> Telemetry:
        """A Telemetry writing where ``settings`` say (its file; the log only if asked)."""
        return cls(clock, events_path=settings.events_path, log_records=settings.log_records)

    def new_attempt_id(self) -> int:
        """Return the next connection attempt id: 1, 2, 3, ... over the whole session (every
        generation's connector draws from the same counter, so ids never repeat)."""
        attempt_id = self._next_attempt
        self._next_attempt += 1
        return attempt_id

    # --- events ------------------------------------------------------------------------

    def dilation_requested(self) -> None:
        """The application called ``dilate()`` (starts the time-to-dilate clock); the record
        names the implementation and its version."""
        self._requested_at = self._clock.seconds()
        self._emit(
            "dilation_requested",
            {"implementation": IMPLEMENTATION, "implementation_version": __version__},
        )

    def please_received(self) -> None:
        """The peer's ``please`` arrived (both sides want to dilate)."""
        self._emit("please_received", {})

    def hints_sent(self, counts: Mapping[str, int]) -> None:
        """We sent connection hints: ``counts`` maps hint type to number of hints."""
        self._emit("hints_sent", {"hints": as_hint_counts(counts)})

    def hints_received(self, counts: Mapping[str, int]) -> None:
        """The peer's connection hints arrived: ``counts`` maps hint type to number."""
        self._emit("hints_received", {"hints": as_hint_counts(counts)})

    def attempt_started(
        self, attempt_id: int, hint_type: str, direction: str, *, generation: int | None = None
    ) -> None:
        """A candidate connection started.

        :param attempt_id: unique within the session (see :meth:`new_attempt_id`).
        :param hint_type: ``direct-tcp-v1``, ``tor-tcp-v1`` or ``relay-v1``.
        :param direction: ``outbound`` (we connected) or ``inbound`` (our listener accepted).
        :param generation: the generation the attempt belongs to, when it differs from the
            current one (an attempt of a generation already replaced); default: the current.
        :raises ValueError: ``direction`` is neither (a programming error).
        """
        fields = self._attempt(attempt_id, hint_type, direction)
        self._emit("attempt_started", fields, generation)

    def attempt_ended(
        self,
        attempt_id: int,
        hint_type: str,
        direction: str,
        outcome: str,
        connect_s: float | None,
        handshake_s: float | None,
        *,
        generation: int | None = None,
    ) -> None:
        """A candidate connection's race is over for it.

        :param outcome: one of :data:`ATTEMPT_OUTCOMES`.
        :param connect_s: seconds until the TCP connection was made (to the peer, or to the
            relay for ``relay-v1``), None if it never was; 0 for ``inbound``.
        :param handshake_s: seconds from connected to the point where the connection may be
            selected (relay line, prologue, Noise, KCM), None if it never got there.
        :param generation: as for :meth:`attempt_started`.
        """
        fields = self._attempt(attempt_id, hint_type, direction)
        fields["outcome"] = vocabulary(outcome, ATTEMPT_OUTCOMES)
        fields["connect_s"] = as_duration(connect_s)
        fields["handshake_s"] = as_duration(handshake_s)
        self._emit("attempt_ended", fields, generation)

    def connection_selected(
        self,
        hint_type: str,
        via_relay: bool,
        since_request_s: float | None = None,
        candidates: int = 1,
        relay_transport: str | None = None,
        relay_index: int | None = None,
        via_mapping: bool = False,
    ) -> None:
        """A connection was selected for the current generation.

        :param since_request_s: seconds since ``dilate()``; computed from the clock when None.
        :param candidates: how many candidates had reached the selectable point.
        :param relay_transport: for a relayed link, how the relay is reached: ``tcp``, ``ws``
            or ``wss`` (never its address).
        :param relay_index: for a relayed link, its relay's position in this peer's own relay
            list (0: the first); None when only the peer named that relay.
        :param via_mapping: a direct connection that came in through our port mapping
            (recorded only when true).
        """
        now = self._clock.seconds()
        self._selected_at = now
        if since_request_s is None and self._requested_at is not None:
            since_request_s = now - self._requested_at
        fields: Record = {
            "hint_type": vocabulary(hint_type, HINT_TYPES),
            "via_relay": bool(via_relay),
            "since_request_s": as_duration(since_request_s),
            "candidates": as_count(candidates),
        }
        if relay_transport is not None:
            fields["relay_transport"] = vocabulary(relay_transport, RELAY_TRANSPORTS)
        if relay_index is not None:
            fields["relay_index"] = as_count(relay_index)
        if via_mapping:
            fields["via_mapping"] = True
        self._emit("connection_selected", fields)

    def connection_lost(self, reason: Cause | str, uptime_s: float | None = None) -> None:
        """The selected connection is gone.

        :param reason: the loss's cause (recorded as ``telemetry.causes.LOST_REASON`` names
            it), or one of :data:`LOST_REASONS` (anything else is recorded as ``other``).
        :param uptime_s: seconds since selection; computed from the clock when None.
        """
        if uptime_s is None and self._selected_at is not None:
            uptime_s = self._clock.seconds() - self._selected_at
        self._selected_at = None
        if isinstance(reason, Cause):
            reason = LOST_REASON[reason]
        fields = {"reason": vocabulary(reason, LOST_REASONS), "uptime_s": as_duration(uptime_s)}
        self._emit("connection_lost", fields)

    def recovered(self, died: str, noticed_by: Cause | str, gap_s: float | None) -> None:
        """A new link was selected after the previous one was lost (emit right after its
        ``connection_selected``, so the record carries the new generation).

        :param died: the lost link's path, ``direct`` or ``relay`` (:data:`PATHS`).
        :param noticed_by: the loss's cause (how it was noticed follows from it:
            ``telemetry.causes.NOTICED_BY_CAUSE``), or how it was noticed, one of
            :data:`NOTICED_BY` (see :func:`noticed_by`).
        :param gap_s: seconds from the last record received on the lost link (or from its
            loss, if none arrived) to this selection.
        """
        if isinstance(noticed_by, Cause):
            noticed_by = NOTICED_BY_CAUSE[noticed_by]
        fields = {
            "died": vocabulary(died, PATHS),
            "noticed_by": vocabulary(noticed_by, NOTICED_BY),
            "gap_s": as_duration(gap_s),
        }
        self._emit("recovered", fields)

    def path_changed(
        self,
        from_path: str,
        to_path: str,
        after_s: float | None,
        reason: str = "upgrade",
        via_mapping: bool = False,
    ) -> None:
        """The link moved to another connection of the same generation (a path upgrade), with
        nothing lost and no new generation.

        :param from_path: the path it left, ``direct`` or ``relay`` (:data:`PATHS`).
        :param to_path: the path it moved to.
        :param after_s: seconds the link had been on ``from_path``.
        :param reason: one of :data:`PATH_CHANGE_REASONS`.
        :param via_mapping: the new connection came in through our port mapping (recorded
            only when true).
        """
        self._selected_at = self._clock.seconds()
        fields = {
            "from_path": vocabulary(from_path, PATHS),
            "to_path": vocabulary(to_path, PATHS),
            "after_s": as_duration(after_s),
            "reason": vocabulary(reason, PATH_CHANGE_REASONS),
        }
        if via_mapping:
            fields["via_mapping"] = True
        self._emit("path_changed", fields)

    def port_mapping(self, change: str, protocol: str | None, lifetime_s: float | None) -> None:
        """The port mapping of our listener changed (``txdilation.portmap``).

        :param change: one of :data:`MAPPING_CHANGES`.
        :param protocol: which protocol holds it (:data:`MAPPING_PROTOCOLS`); None for
            ``unavailable``.
        :param lifetime_s: the lease granted (None: permanent, or no mapping).
        """
        fields: Record = {"change": vocabulary(change, MAPPING_CHANGES)}
        if protocol is not None:
            fields["protocol"] = vocabulary(protocol, MAPPING_PROTOCOLS)
        fields["lifetime_s"] = as_duration(lifetime_s)
        self._emit("port_mapping", fields)

    def reconnect(self) -> None:
        """We (the Leader) asked for a new generation."""
        self._emit("reconnect", {})

    def reconnecting(self) -> None:
        """We (the Follower) acknowledged a new generation."""
        self._emit("reconnecting", {})

    def traffic(
        self,
        records_sent: int,
        bytes_sent: int,
        records_acked: int,
        bytes_retransmitted: int,
        records_received: int,
        bytes_received: int,
        queue_bytes: int,
        final: bool = False,
    ) -> None:
        """Cumulative traffic counters of the session (all generations); ``final`` at the end."""
        stats = TrafficStats(
            records_sent,
            bytes_sent,
            records_acked,
            bytes_retransmitted,
            records_received,
            bytes_received,
            queue_bytes,
        )
        self._emit_traffic(stats, final)

    def ping_rtt(self, rtt_s: float) -> None:
        """A PONG answered our PING after ``rtt_s`` seconds."""
        self._emit("ping_rtt", {"rtt_s": as_duration(rtt_s)})

    def subchannel_opened(self, scid: int, initiator: bool) -> None:
        """Subchannel ``scid`` opened; ``initiator`` is True when we sent the OPEN."""
        self._subchannels_opened_at[scid] = self._clock.seconds()
        self._emit("subchannel_opened", {"scid": as_count(scid), "initiator": bool(initiator)})

    def subchannel_closed(
        self, scid: int, bytes_in: int, bytes_out: int, duration_s: float | None = None
    ) -> None:
        """Subchannel ``scid`` closed after carrying ``bytes_in``/``bytes_out`` payload bytes.

        :param duration_s: seconds it was open; when None, the time since its
            :meth:`subchannel_opened` (None if that was not recorded).
        """
        opened_at = self._subchannels_opened_at.pop(scid, None)
        if duration_s is None and opened_at is not None:
            duration_s = self._clock.seconds() - opened_at
        fields = {
            "scid": as_count(scid),
            "bytes_in": as_count(bytes_in),
            "bytes_out": as_count(bytes_out),
            "duration_s": as_duration(duration_s),
        }
        self._emit("subchannel_closed", fields)

    def session_ended(self, reason: str) -> None:
        """The wormhole closed; ``reason`` is one of :data:`END_REASONS`.

        Stops periodic traffic; with a traffic source (:meth:`set_traffic_source`), first emits
        its last sample as the ``traffic`` record with ``final`` true.
        """
        self.stop_periodic_traffic()
        if self._traffic_source is not None:
            self._emit_traffic(self._traffic_source(), True)
        self._emit("session_ended", {"reason": vocabulary(reason, END_REASONS)})

    # --- traffic -----------------------------------------------------------------------

    def set_traffic_source(self, sample: Callable[[], TrafficStats]) -> None:
        """Where this session's traffic counters come from (the multiplexer's).

        Used by :meth:`start_periodic_traffic` when given no ``sample``, and by
        :meth:`session_ended` for the final record. ``sample()`` must be cheap.
        """
        self._traffic_source = sample

    @property
    def periodic_traffic(self) -> bool:
        """True while periodic ``traffic`` records are scheduled."""
        return self._periodic.active

    def start_periodic_traffic(
        self, interval_s: float, sample: Callable[[], TrafficStats] | None = None
    ) -> None:
        """Emit a ``traffic`` record from ``sample()`` every ``interval_s`` seconds.

        Replaces any earlier schedule; :meth:`session_ended` stops it.

        :param sample: default: the traffic source (:meth:`set_traffic_source`).
        :raises ValueError: ``interval_s`` is not positive, or no ``sample`` and no source.
        """
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        if sample is None:
            sample = self._traffic_source
            if sample is None:
                raise ValueError("no sample given and no traffic source set")
        self._periodic.start(interval_s, sample)

    def stop_periodic_traffic(self) -> None:
        """Cancel the periodic ``traffic`` records, if any."""
        self._periodic.stop()

    # --- internals ---------------------------------------------------------------------

    def _attempt(self, attempt_id: int, hint_type: str, direction: str) -> Record:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be outbound or inbound, not {direction!r}")
        return {
            "attempt": as_count(attempt_id),
            "hint_type": vocabulary(hint_type, HINT_TYPES),
            "direction": direction,
        }

    def _emit_traffic(self, stats: TrafficStats, final: bool) -> None:
        self._emit("traffic", traffic_fields(stats, final))


__all__ = ["Telemetry", "TrafficStats"]
