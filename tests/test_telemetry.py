"""Tests for txdilation.telemetry: records, schema, privacy guards and the JSON-lines writer."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

import txdilation
from txdilation import telemetry as tm
from txdilation.settings import TelemetrySettings
from txdilation.wire.roles import FOLLOWER, LEADER

VALIDATOR = jsonschema.Draft202012Validator(json.loads(tm.schema_text()))
ADDRESSISH = re.compile(r"\d{1,3}(\.\d{1,3}){3}|[0-9a-f]*:[0-9a-f]*:|\w+\.\w+:\d+")


def make(session: str = "ab" * 8, **kwargs: Any) -> tuple[tm.Telemetry, list[dict], Clock]:
    """A Telemetry on a fresh Clock (starting at t=1000) collecting records in a list."""
    clock = Clock()
    clock.advance(1000.0)
    records: list[dict] = []
    t = tm.Telemetry(clock, session_id=session, sink=records.append, **kwargs)
    return t, records, clock


def drive_everything(t: tm.Telemetry, clock: Clock) -> None:
    """Call every event method once, in a plausible order, advancing the clock between."""
    t.dilation_requested()
    clock.advance(0.5)
    t.please_received()
    t.set_role(LEADER)
    t.set_pair("a1b2c3d4e5", "0f0f0f0f0f")
    t.set_generation(1)
    t.hints_sent({"direct-tcp-v1": 2, "relay-v1": 1})
    t.hints_received({"direct-tcp-v1": 1})
    t.attempt_started(1, "direct-tcp-v1", "outbound")
    clock.advance(0.25)
    t.attempt_ended(1, "direct-tcp-v1", "outbound", "selected", 0.01, 0.02)
    t.connection_selected("direct-tcp-v1", False, candidates=2)
    t.subchannel_opened(1, initiator=True)
    t.ping_rtt(0.004)
    t.traffic(10, 1000, 9, 0, 8, 800, 100)
    clock.advance(2.0)
    t.subchannel_closed(1, 800, 1000, 2.0)
    t.connection_lost("network_error")
    t.reconnect()
    t.reconnecting()
    t.set_generation(2)
    t.recovered("direct", tm.noticed_by("network_error"), 0.5)
    t.path_changed("relay", "direct", 1.5)
    t.port_mapping("mapped", "pcp", 7200.0)
    t.traffic(10, 1000, 10, 100, 8, 800, 0, final=True)
    t.session_ended("happy")


class RecordTests(SynchronousTestCase):
    """What each event method records."""

    def test_every_event_validates(self) -> None:
        """Every event method produces a record that the shipped JSON Schema accepts."""
        t, records, clock = make()
        drive_everything(t, clock)
        self.assertEqual({r["event"] for r in records}, set(tm.EVENTS))
        for r in records:
            VALIDATOR.validate(r)

    def test_the_first_record_names_the_implementation(self) -> None:
        """``dilation_requested`` says which Dilation emitted the session: txdilation and its
        version; the schema takes no other implementation, and still takes a record of a
        version without the fields."""
        t, records, _ = make()
        t.dilation_requested()
        [first] = records
        named = (first["implementation"], first["implementation_version"])
        self.assertEqual(named, ("txdilation", txdilation.__version__))
        VALIDATOR.validate(first)
        self.assertFalse(VALIDATOR.is_valid({**first, "implementation": "magic-wormhole"}))
        older = {k: v for k, v in first.items() if not k.startswith("implementation")}
        self.assertTrue(VALIDATOR.is_valid(older))

    def test_envelope(self) -> None:
        """Records carry schema, clock ts, seq, session; role/generation/pair once known."""
        t, records, clock = make()
        drive_everything(t, clock)
        first, last = records[0], records[-1]
        self.assertEqual(first["schema"], "txdilation-telemetry/1")
        self.assertEqual(first["ts"], 1000.0)
        self.assertEqual(first["session"], "ab" * 8)
        self.assertIsNone(first["role"])
        self.assertNotIn("generation", first)
        self.assertNotIn("pair", first)
        self.assertEqual([r["seq"] for r in records], list(range(len(records))))
        self.assertEqual(last["role"], "leader")
        self.assertEqual(last["generation"], 2)
        self.assertEqual(last["pair"], tm.pair_id("a1b2c3d4e5", "0f0f0f0f0f"))
        self.assertEqual(last["ts"], 1002.75)

    def test_computed_durations(self) -> None:
        """since_request_s and uptime_s default to clock differences from request/selection."""
        t, records, clock = make()
        drive_everything(t, clock)
        by_event = {r["event"]: r for r in records}
        self.assertEqual(by_event["connection_selected"]["since_request_s"], 0.75)
        self.assertEqual(by_event["connection_lost"]["uptime_s"], 2.0)
        self.assertEqual(by_event["connection_selected"]["candidates"], 2)
        self.assertIs(by_event["connection_selected"]["via_relay"], False)

    def test_port_mapping(self) -> None:
        """``port_mapping`` carries the change, the protocol and the lease (none when
        permanent or unavailable), values outside the vocabularies as other; ``via_mapping``
        appears on a selection or a path change only when true."""
        t, records, _ = make()
        t.port_mapping("mapped", "upnp-igd", math.inf)
        t.port_mapping("unavailable", None, None)
        t.port_mapping("gone away", "socks", 60.0)
        t.connection_selected("direct-tcp-v1", False, via_mapping=True)
        t.path_changed("relay", "direct", 1.0, via_mapping=False)
        fields = [{k: r.get(k) for k in ("change", "protocol", "lifetime_s")} for r in records[:3]]
        self.assertEqual(
            fields,
            [
                {"change": "mapped", "protocol": "upnp-igd", "lifetime_s": None},
                {"change": "unavailable", "protocol": None, "lifetime_s": None},
                {"change": "other", "protocol": "other", "lifetime_s": 60.0},
            ],
        )
        self.assertIs(records[3]["via_mapping"], True)
        self.assertNotIn("via_mapping", records[4])
        for r in records:
            VALIDATOR.validate(r)

    def test_recovered(self) -> None:
        """``recovered`` carries the lost path, how the loss was noticed and the gap; values
        outside the vocabularies become other, a negative gap 0 and a non-finite one none."""
        t, records, _ = make()
        t.recovered("relay", "probe", 1.25)
        t.recovered("tcp:10.0.0.1:4001", "a free text", -3.0)
        t.recovered("direct", "liveness", math.nan)
        fields = [{k: r.get(k) for k in ("died", "noticed_by", "gap_s")} for r in records]
        self.assertEqual(
            fields,
            [
                {"died": "relay", "noticed_by": "probe", "gap_s": 1.25},
                {"died": "other", "noticed_by": "other", "gap_s": 0.0},
                {"died": "direct", "noticed_by": "liveness", "gap_s": None},
            ],
        )
        for r in records:
            VALIDATOR.validate(r)

    def test_noticed_by_maps_every_lost_reason(self) -> None:
        """Each loss reason maps to how it was noticed, as the issue defines it."""
        by_way = {  # the definition, written the other way round
            "probe": {"probe_unanswered"},
            "liveness": {"timeout"},
            "network_change": {"network_change"},
            "peer_report": {"peer_report"},
            "connection_closed": {"closed", "peer_closed", "network_error"},
            "upgrade": {"path_upgrade"},  # we left the link for a direct path (issue 19)
            "other": {"protocol_error", "stopped", "other"},
        }
        expected = {reason: way for way, reasons in by_way.items() for reason in reasons}
        self.assertEqual(set(expected), tm.LOST_REASONS)
        self.assertEqual({r: tm.noticed_by(r) for r in tm.LOST_REASONS}, expected)
        self.assertEqual(tm.noticed_by("10.0.0.1"), "other")
        self.assertEqual(set(by_way), tm.NOTICED_BY)

    def test_bad_durations(self) -> None:
        """Negative durations are clamped to 0 and non-finite ones are left out."""
        t, records, _ = make()
        t.attempt_ended(3, "relay-v1", "outbound", "timeout", -1.0, math.nan)
        t.ping_rtt(math.inf)
        self.assertEqual(records[0]["connect_s"], 0.0)
        self.assertNotIn("handshake_s", records[0])
        self.assertNotIn("rtt_s", records[1])

    def test_bad_counters(self) -> None:
        """Negative or non-int counters are programming errors: ValueError, nothing emitted."""
        t, records, _ = make()
        self.assertRaises(ValueError, t.subchannel_opened, -1, True)
        self.assertRaises(ValueError, t.hints_sent, {"relay-v1": True})
        self.assertRaises(ValueError, t.set_generation, 1.5)
        self.assertEqual(records, [])

    def test_session_id(self) -> None:
        """A random 16-hex session id by default; a non-hex session id is refused."""
        t, _, _ = make()
        other = tm.Telemetry(Clock())
        self.assertRegex(other.session_id, r"^[0-9a-f]{16}$")
        self.assertNotEqual(other.session_id, t.session_id)
        self.assertRaises(ValueError, tm.Telemetry, Clock(), session_id="1.2.3.4")

    def test_roles(self) -> None:
        """Role enums and their names are recorded as lowercase leader/follower; others refused."""
        t, records, _ = make()
        for role in (FOLLOWER, "Leader"):
            t.set_role(role)
            t.reconnect()
        self.assertRaises(ValueError, t.set_role, "10.0.0.1")
        self.assertEqual([r["role"] for r in records], ["follower", "leader"])

    def test_periodic_traffic(self) -> None:
        """start_periodic_traffic emits every interval from sample(); session_ended stops it."""
        t, records, clock = make()
        n = iter(range(100))
        t.start_periodic_traffic(10.0, lambda: tm.TrafficStats(records_sent=next(n)))
        clock.advance(10.0)
        clock.advance(10.0)
        t.session_ended("closed")
        clock.advance(50.0)
        self.assertEqual([r["event"] for r in records], ["traffic", "traffic", "session_ended"])
        self.assertEqual([r.get("records_sent") for r in records[:2]], [0, 1])
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertRaises(ValueError, t.start_periodic_traffic, 0, tm.TrafficStats)


class PairTests(SynchronousTestCase):
    """The pair id joins both peers' logs without recording their sides."""

    def test_both_peers_agree(self) -> None:
        """Leader and follower, each passing (mine, theirs), get the same 16-hex pair id."""
        a, ra, _ = make("aa" * 8)
        b, rb, _ = make("bb" * 8)
        a.set_pair("1111111111", "2222222222")
        b.set_pair("2222222222", "1111111111")
        a.reconnect()
        b.reconnecting()
        self.assertEqual(ra[0]["pair"], rb[0]["pair"])
        self.assertRegex(ra[0]["pair"], r"^[0-9a-f]{16}$")
        self.assertNotEqual(tm.pair_id("1111111111", "3333333333"), ra[0]["pair"])
        self.assertNotIn("1111111111", json.dumps(ra + rb))


class PrivacyTests(SynchronousTestCase):
    """Nothing outside the vocabularies reaches a record, whatever the protocol passes."""

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=40))
    def test_free_text_never_recorded(self, text: str) -> None:
        """Arbitrary strings in every string parameter are recorded as vocabulary or other."""
        t, records, _ = make()
        t.set_role(LEADER)
        t.hints_sent({text: 1})
        t.attempt_started(1, text, "inbound")
        t.attempt_ended(1, text, "outbound", text, None, None)
        t.connection_selected(text, True, 1.0, 1)
        t.connection_lost(text)
        t.session_ended(text)
        vocab = (
            tm.HINT_TYPES | tm.DIRECTIONS | tm.ATTEMPT_OUTCOMES | tm.LOST_REASONS | tm.END_REASONS
        )
        for r in records:
            VALIDATOR.validate(r)
            for key, value in r.items():
                if key in ("schema", "event", "session", "pair"):
                    continue
                if isinstance(value, str):
                    self.assertIn(value, vocab | {"leader", "follower"})
            self.assertTrue(set(r.get("hints", {})) <= tm.HINT_TYPES)

    def test_addresses_never_emitted(self) -> None:
        """Address-looking reasons and hint types (IPs, host:port) become 'other'."""
        t, records, clock = make()
        for bad in ("10.0.0.1", "tcp:192.168.1.2:4001", "::1", "fe80::1", "relay.example.com:4001"):
            t.connection_lost(bad)
            t.attempt_started(1, bad, "outbound")
            self.assertRaises(ValueError, t.attempt_started, 1, "relay-v1", bad)
            t.hints_received({bad: 2})
        drive_everything(t, clock)
        for r in records:
            line = json.dumps(r)
            self.assertIsNone(ADDRESSISH.search(line), line)
            for value in r.values():
                if isinstance(value, str) and value != tm.SCHEMA:
                    self.assertRaises(ValueError, ipaddress.ip_address, value)

    def test_relay_fields_name_no_address(self) -> None:
        """A relayed selection says how (tcp/ws/wss) and which of our relays (an index),
        never where; an unknown transport is 'other'; both are absent for a direct link."""
        t, records, _ = make()
        t.connection_selected("relay-v1", True, 1.0, 1, relay_transport="ws", relay_index=1)
        t.connection_selected("relay-v1", True, 1.0, 1, relay_transport="ws://10.0.0.1:4002/")
        t.connection_selected("direct-tcp-v1", False, 1.0, 1)
        for r in records:
            VALIDATOR.validate(r)
        self.assertEqual((records[0]["relay_transport"], records[0]["relay_index"]), ("ws", 1))
        self.assertEqual(records[1]["relay_transport"], "other")
        self.assertNotIn("relay_index", records[1])
        self.assertNotIn("relay_transport", records[2])
        self.assertFalse(VALIDATOR.is_valid({**records[0], "relay_index": "10.0.0.1"}))
        self.assertRaises(ValueError, t.connection_selected, "relay-v1", True, relay_index=-1)

    def test_schema_rejects_forbidden_fields(self) -> None:
        """The schema itself refuses extra fields, addresses as values and unknown events."""
        t, records, _ = make()
        t.connection_selected("relay-v1", True, 1.0, 1)
        good = records[0]
        VALIDATOR.validate(good)
        for bad in (
            {**good, "address": "10.0.0.1"},
            {**good, "code": "4-purple-sausages"},
            {**good, "hint_type": "tcp:10.0.0.1:4001"},
            {**good, "event": "payload"},
            {**good, "session": "not-hex-at-all!!"},
            {k: v for k, v in good.items() if k != "via_relay"},
        ):
            self.assertFalse(VALIDATOR.is_valid(bad), bad)

    def test_schema_matches_module(self) -> None:
        """The shipped schema's vocabularies are exactly the module's (no drift)."""
        schema = json.loads(tm.schema_text())
        self.assertEqual(schema["properties"]["event"]["enum"], list(tm.EVENTS))
        self.assertEqual(set(schema["$defs"]["hint_type"]["enum"]), tm.HINT_TYPES)
        self.assertEqual(set(schema["$defs"]["direction"]["enum"]), tm.DIRECTIONS)
        thens = {
            c["if"]["properties"]["event"]["const"]: c["then"]["properties"]
            for c in schema["allOf"]
        }
        self.assertEqual(set(thens["attempt_ended"]["outcome"]["enum"]), tm.ATTEMPT_OUTCOMES)
        self.assertEqual(set(thens["connection_lost"]["reason"]["enum"]), tm.LOST_REASONS)
        self.assertEqual(set(thens["recovered"]["died"]["enum"]), tm.PATHS | {"other"})
        self.assertEqual(set(thens["recovered"]["noticed_by"]["enum"]), tm.NOTICED_BY)
        self.assertEqual(set(thens["session_ended"]["reason"]["enum"]), tm.END_REASONS)
        selected = thens["connection_selected"]
        self.assertEqual(set(selected["relay_transport"]["enum"]), tm.RELAY_TRANSPORTS)


class OutputTests(SynchronousTestCase):
    """Where records go: twisted.logger and the TXDILATION_EVENTS file."""

    def test_twisted_logger(self) -> None:
        """Each record is a twisted.logger event in namespace txdilation.telemetry."""
        seen: list[dict] = []
        log = Logger(namespace=tm.NAMESPACE, observer=seen.append)
        t, records, _ = make(log=log)
        t.dilation_requested()
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["log_namespace"], "txdilation.telemetry")
        self.assertEqual(tm.record_from_log_event(seen[0]), records[0])
        self.assertIsNone(tm.record_from_log_event({"log_namespace": "other"}))

    def test_log_lines_only_when_asked(self) -> None:
        """From the environment the records are log lines only at TXDILATION_LOG_LEVEL=debug
        (a plain twistd's log keeps every level: 13 of 41 lines were telemetry); the file and
        the sink get every record anyway."""
        from txdilation.settings import TelemetrySettings

        self.assertFalse(TelemetrySettings.from_environ({}).log_records)
        self.assertFalse(
            TelemetrySettings.from_environ({"TXDILATION_LOG_LEVEL": "info"}).log_records
        )
        self.assertTrue(
            TelemetrySettings.from_environ({"TXDILATION_LOG_LEVEL": "Debug"}).log_records
        )
        seen: list[dict] = []
        records: list[dict] = []
        t = tm.Telemetry(
            Clock(),
            sink=records.append,
            log=Logger(namespace=tm.NAMESPACE, observer=seen.append),
            log_records=False,
        )
        t.dilation_requested()
        self.assertEqual((len(seen), len(records)), (0, 1))

    def test_default_logger_namespace(self) -> None:
        """Without a logger argument the records go to the global log in our namespace."""
        from twisted.logger import globalLogPublisher

        seen: list[dict] = []
        globalLogPublisher.addObserver(seen.append)
        self.addCleanup(globalLogPublisher.removeObserver, seen.append)
        t = tm.Telemetry(Clock())
        t.reconnect()
        ours = [tm.record_from_log_event(e) for e in seen]
        self.assertEqual([r["event"] for r in ours if r], ["reconnect"])

    def test_env_file_writer(self) -> None:
        """TXDILATION_EVENTS=PATH appends one flushed JSON object per line, shared per path."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"earlier": true}\n')
        events = TelemetrySettings.from_environ({"TXDILATION_EVENTS": path}).events_path
        a = tm.Telemetry(Clock(), session_id="aa" * 8, events_path=events)
        b = tm.Telemetry(Clock(), session_id="bb" * 8, events_path=events)
        a.dilation_requested()
        b.dilation_requested()
        a.session_ended("happy")
        with open(path) as f:  # read while the writer is still open: lines are flushed
            lines = [json.loads(line) for line in f]
        self.assertEqual(lines[0], {"earlier": True})
        self.assertEqual(
            [(r["session"], r["event"]) for r in lines[1:]],
            [
                ("aa" * 8, "dilation_requested"),
                ("bb" * 8, "dilation_requested"),
                ("aa" * 8, "session_ended"),
            ],
        )
        for r in lines[1:]:
            VALIDATOR.validate(r)
        tm.writer_for(path).close()
        a.reconnect()  # a closed writer drops records instead of raising
        self.assertIsNot(tm.writer_for(path), None)

    def test_no_env_no_file(self) -> None:
        """Without TXDILATION_EVENTS no file sink is installed."""
        self.assertIsNone(TelemetrySettings.from_environ({}).events_path)
        self.assertIsNone(TelemetrySettings.from_environ({"TXDILATION_EVENTS": ""}).events_path)

    def test_unopenable_file(self) -> None:
        """An unopenable TXDILATION_EVENTS path raises OSError at construction, not later."""
        env = {"TXDILATION_EVENTS": self.mktemp() + "/missing-dir/events.jsonl"}
        events = TelemetrySettings.from_environ(env).events_path
        self.assertRaises(OSError, tm.Telemetry, Clock(), events_path=events)
