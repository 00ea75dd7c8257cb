"""Telemetry from real dilations, events written through TXDILATION_EVENTS and checked against
the schema: two Managers over real loopback TCP (in-memory mailbox) with one forced reconnect,
and two real wormholes through the real mailbox server and transit relay with one link cut."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import tempfile
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import SynchronousTestCase, TestCase

import txdilation
from tests.mailbox.test_manager import Collector, DilatedPairBase, EchoProtocol, make_pair
from tests.support.harness import RealServersMixin, restore_env
from txdilation import telemetry as tm
from txdilation.settings import DEFAULT_TRAFFIC_INTERVAL, TelemetrySettings

try:
    import jsonschema
except ImportError:  # pragma: no cover (jsonschema comes with the analytics extra)
    jsonschema = None

TRAFFIC_INTERVAL = "TXDILATION_TRAFFIC_INTERVAL"
TRAFFIC_FIELDS = tuple(f.name for f in dataclasses.fields(tm.TrafficStats))


def validate_all(case: TestCase, records: list[dict[str, Any]]) -> None:
    """Every record validates against the shipped JSON Schema (skipped without jsonschema)."""
    if jsonschema is None:
        case.skipTest("jsonschema is not installed")
    validator = jsonschema.Draft202012Validator(json.loads(tm.schema_text()))
    for r in records:
        validator.validate(r)


def by_session(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by session id, each group in emission order."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        sessions.setdefault(r["session"], []).append(r)
    return sessions


class TelemetryEmissionTests(DilatedPairBase):
    def setUp(self) -> None:
        super().setUp()
        handle, self.path = tempfile.mkstemp(suffix=".jsonl")
        os.close(handle)
        self.addCleanup(os.unlink, self.path)
        previous = os.environ.get(tm.ENV_VAR)
        os.environ[tm.ENV_VAR] = self.path
        self.addCleanup(
            lambda: (
                os.environ.pop(tm.ENV_VAR, None)
                if previous is None
                else os.environ.__setitem__(tm.ENV_VAR, previous)
            )
        )

    @inlineCallbacks
    def test_reconnect_produces_schema_valid_events_with_matching_pairs(self) -> Any:
        """Both sides write schema-valid events; their pair ids match; each side records a
        selection per generation, the Leader a reconnect and the Follower a reconnecting, and
        no record carries an address, side or payload."""
        _pipes, dilators, apis = yield self.dilate_pair()
        apis[0].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[1].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"secret-payload")
        yield client.wait_for(14)
        first = dilators[1]._manager.connection
        first.disconnect()
        client.transport.write(b"!")
        yield client.wait_for(15)
        for d in dilators:
            d.stop()
        for t in self._terms:
            yield t.stopped
        records = _read_records(self.path)
        text = json.dumps(records)
        if jsonschema is not None:
            validator = jsonschema.Draft202012Validator(json.loads(tm.schema_text()))
            for r in records:
                validator.validate(r)
        sessions: dict[str, list[dict[str, Any]]] = {}
        for r in records:
            sessions.setdefault(r["session"], []).append(r)
        self.assertEqual(len(sessions), 2)
        pairs = {r["pair"] for r in records if r.get("pair")}
        self.assertEqual(len(pairs), 1)
        by_role = {}
        for events in sessions.values():
            roles = {r["role"] for r in events if r.get("role")}
            self.assertEqual(len(roles), 1)
            by_role[roles.pop()] = [r["event"] for r in events]
        self.assertEqual(set(by_role), {"leader", "follower"})
        for kinds in by_role.values():
            self.assertEqual(kinds[0], "dilation_requested")
            self.assertEqual(kinds.count("connection_selected"), 2)
            self.assertIn("connection_lost", kinds)
            self.assertEqual(kinds[-1], "session_ended")
        self.assertIn("reconnect", by_role["leader"])
        self.assertEqual(by_role["follower"].count("reconnecting"), 1)
        for events in sessions.values():
            # the second selection is a recovery: right after it, what died and the gap
            kinds = [r["event"] for r in events]
            (recovered,) = [r for r in events if r["event"] == "recovered"]
            self.assertEqual(kinds[kinds.index("recovered") - 1], "connection_selected")
            self.assertEqual(recovered["generation"], 2)
            self.assertEqual(recovered["died"], "direct")
            self.assertIn(recovered["noticed_by"], {"connection_closed", "peer_report"})
            self.assertGreaterEqual(recovered["gap_s"], 0)
            self.assertLess(recovered["gap_s"], 30)
        for forbidden in ("secret-payload", "127.0.0.1", dilators[0]._manager._core.my_side):
            self.assertNotIn(forbidden, text)

    @inlineCallbacks
    def test_stopped_while_connecting(self) -> Any:
        """Both sides stop while their only attempts (dials of a relay that never pairs them)
        are connected but not ready: each records them cancelled, with a connect time, before
        a final traffic record of zeros and session_ended; nothing was selected."""
        relay = SilentRelay()
        port = reactor.listenTCP(0, relay, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        _pipes, terms, dilators = make_pair()
        key = os.urandom(32)
        for d in dilators:
            d.got_key(key)
            d.got_wormhole_versions({"can-dilate": ["ged"]})
        hint = f"tcp:127.0.0.1:{port.getHost().port}"
        for d in dilators:
            d.dilate(no_listen=True, transit_relay_location=hint)
        yield relay.accepted(2)
        for d in dilators:
            d.stop()
        for t in terms:
            yield t.stopped
        yield relay.all_lost()
        records = _read_records(self.path)
        validate_all(self, records)
        sessions = by_session(records)
        self.assertEqual(len(sessions), 2)
        zeros = {k: 0 for k in TRAFFIC_FIELDS}
        for events in sessions.values():
            kinds = [r["event"] for r in events]
            self.assertNotIn("connection_selected", kinds)
            self.assertEqual(kinds[-3:], ["attempt_ended", "traffic", "session_ended"])
            (attempt,) = [r for r in events if r["event"] == "attempt_ended"]
            self.assertEqual(
                (attempt["hint_type"], attempt["direction"], attempt["outcome"]),
                ("relay-v1", "outbound", "cancelled"),
            )
            self.assertGreaterEqual(attempt["connect_s"], 0)
            self.assertNotIn("handshake_s", attempt)
            self.assertEqual({k: events[-2][k] for k in TRAFFIC_FIELDS}, zeros)
            self.assertTrue(events[-2]["final"])


class SilentRelay(Factory):
    """A TCP server that accepts connections and never answers (a relay that never pairs)."""

    def __init__(self) -> None:
        self.connections: list[Protocol] = []
        self.lost: list[Deferred[None]] = []
        self._waiting: list[tuple[int, Deferred[None]]] = []

    def buildProtocol(self, addr: Any) -> Protocol:
        relay = self
        lost: Deferred[None] = Deferred()

        class Silent(Protocol):
            def connectionLost(self, reason: Any = None) -> None:
                lost.callback(None)

        protocol = Silent()
        self.connections.append(protocol)
        self.lost.append(lost)
        for n, d in list(relay._waiting):
            if len(self.connections) >= n:
                self._waiting.remove((n, d))
                reactor.callLater(0, d.callback, None)
        return protocol

    def accepted(self, n: int) -> Deferred[None]:
        """Fires once ``n`` connections were accepted."""
        d: Deferred[None] = Deferred()
        self._waiting.append((n, d))
        if len(self.connections) >= n:
            self._waiting.remove((n, d))
            d.callback(None)
        return d

    def all_lost(self) -> Deferred[Any]:
        """Fires once every accepted connection is closed."""
        return gatherResults(self.lost)


APPID = "lothar.com/txdilation/telemetry-test"
MESSAGES = (b"a" * 10, b"b" * 1000, b"c" * 70000)
REPLAYED = b"r" * 1500  # written in the same turn as the cut: lost with the link, replayed
AFTER = b"z" * 300
LOSING = {"superseded", "cancelled"}


def _read_records(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if os.environ.get("TXDILATION_TEST_DUMP_EVENTS"):  # to look at real records
        print(text)
    return [json.loads(line) for line in text.splitlines()]


class RealServersTelemetryTests(RealServersMixin, TestCase):
    """Two in-process wormholes (stock magic-wormhole with txdilation installed) through the
    real mailbox server and transit relay on 127.0.0.1; one subchannel; one link cut."""

    timeout = 60

    def setUp(self) -> Any:
        handle, self.path = tempfile.mkstemp(suffix=".jsonl")
        os.close(handle)
        self.addCleanup(os.unlink, self.path)
        previous = {name: os.environ.get(name) for name in (tm.ENV_VAR, TRAFFIC_INTERVAL)}
        os.environ[tm.ENV_VAR] = self.path
        os.environ[TRAFFIC_INTERVAL] = "0.05"
        self.addCleanup(restore_env, previous)
        if not txdilation.is_installed():
            txdilation.install()
            self.addCleanup(txdilation.uninstall)
        return super().setUp()

    async def _session(self) -> dict[str, Any]:
        """Dilate, echo MESSAGES, cut the link with REPLAYED unsent, echo AFTER, close."""
        import wormhole

        a = wormhole.create(APPID, self.mailbox.url, self.reactor, dilation=True)
        b = wormhole.create(APPID, self.mailbox.url, self.reactor, dilation=True)
        a.allocate_code()
        code = await a.get_code()
        b.set_code(code)
        relay = self.transit_relay.hint
        da = a.dilate(transit_relay_location=relay)
        db = b.dilate(transit_relay_location=relay)
        await da.listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = await db.connector_for("echo").connect(Factory.forProtocol(Collector))
        sent = b""
        for message in MESSAGES:
            client.transport.write(message)
            sent += message
            await client.wait_for(len(sent))
        for side in (da, db):  # every record so far acknowledged, both ways
            await side._manager.multiplexer.when_acknowledged()
        manager = client.transport._manager
        first = manager.connection
        client.transport.write(REPLAYED)  # buffered by the TCP transport...
        first.abort()  # ...and lost with it: the Leader reconnects, the queue replays it
        sent += REPLAYED
        await client.wait_for(len(sent))
        self.assertIsNot(manager.connection, first)
        client.transport.write(AFTER)
        sent += AFTER
        got = await client.wait_for(len(sent))
        self.assertEqual(got, sent)
        client.transport.loseConnection()
        await client.lost
        await a.close()
        await b.close()
        return {
            "code": code,
            "sides": (da._manager._core.my_side, db._manager._core.my_side),
            "sent": sent,
        }

    @inlineCallbacks
    def test_real_dilation_with_reconnect_emits_every_event(self) -> Any:
        """Both peers of a real dilation with a reconnect write schema-valid records whose pair
        ids match: per generation one selected attempt and losing attempts recorded (no
        handshake failure or timeout on loopback), every attempt started once and ended once
        with a unique id; a final traffic record (after periodic ones that never decrease)
        whose byte and record counts are exactly what the subchannel carried, the replayed
        bytes counted as retransmitted on the side that lost them; a subchannel opened and
        closed on both sides with exact payload byte counts; and no code, side, address or
        payload anywhere."""
        run = yield Deferred.fromCoroutine(self._session())
        records = _read_records(self.path)
        validate_all(self, records)
        sessions = by_session(records)
        self.assertEqual(len(sessions), 2)
        self.assertEqual(len({r["pair"] for r in records if "pair" in r}), 1)
        self.assertEqual(len({r["session"] for r in records if "pair" in r}), 2)
        total = len(run["sent"])
        n = len(MESSAGES) + 2  # DATA records each way
        for events in sessions.values():
            role = events[-1]["role"]
            self.assertEqual(events[0]["event"], "dilation_requested")
            self.assertEqual(events[-1]["event"], "session_ended")
            self.check_attempts(events)
            final = self.check_traffic(events)
            opened = [r for r in events if r["event"] == "subchannel_opened"]
            closed = [r for r in events if r["event"] == "subchannel_closed"]
            self.assertEqual(len(opened), 1)
            self.assertEqual(len(closed), 1)
            self.assertEqual(opened[0]["scid"], closed[0]["scid"])
            self.assertEqual((closed[0]["bytes_in"], closed[0]["bytes_out"]), (total, total))
            self.assertGreater(closed[0]["duration_s"], 0)
            initiator = opened[0]["initiator"]
            self.assertEqual(final["bytes_sent"], total)
            self.assertEqual(final["bytes_received"], total)
            # the client sends OPEN, n DATA, CLOSE and gets n DATA and the answering CLOSE
            self.assertEqual(final["records_sent"], n + 2 if initiator else n + 1)
            self.assertEqual(final["records_received"], n + 1 if initiator else n + 2)
            self.assertEqual(final["records_acked"], final["records_sent"])
            self.assertEqual(final["queue_bytes"], 0)
            lost_it = len(REPLAYED) if initiator else 0
            self.assertEqual(final["bytes_retransmitted"], lost_it, role)
        self.assertEqual(
            sorted(r["initiator"] for r in records if r["event"] == "subchannel_opened"),
            [False, True],
        )
        text = json.dumps(records)
        for forbidden in ("127.0.0.1", run["code"], *run["sides"], "aaaaaaaaaa", "zzzzzzz"):
            self.assertNotIn(forbidden, text)

    def check_attempts(self, events: list[dict[str, Any]]) -> None:
        """Attempts of one session: started once, ended once, ids unique; per generation
        exactly one selected (a warm standby path's winner ends ``standby``, at most one per
        generation); some lost the race; no handshake failed or timed out."""
        started = {r["attempt"]: r for r in events if r["event"] == "attempt_started"}
        ended = [r for r in events if r["event"] == "attempt_ended"]
        self.assertEqual(len(started), len([r for r in events if r["event"] == "attempt_started"]))
        self.assertEqual(sorted(r["attempt"] for r in ended), sorted(started))
        for r in ended:
            s = started[r["attempt"]]
            for key in ("hint_type", "direction", "generation"):
                self.assertEqual(r[key], s[key], r)
            # a dial may also be refused once the peer's race ended and its listener closed
            self.assertIn(r["outcome"], LOSING | {"selected", "standby", "connect_failed"}, r)
            if r["outcome"] == "selected":
                self.assertGreaterEqual(r["connect_s"], 0)
                self.assertGreater(r["handshake_s"], 0)
        selected = [r["generation"] for r in ended if r["outcome"] == "selected"]
        self.assertEqual(selected, [1, 2])
        standby = [r["generation"] for r in ended if r["outcome"] == "standby"]
        self.assertEqual(len(standby), len(set(standby)), standby)
        self.assertTrue(any(r["outcome"] in LOSING for r in ended))
        self.assertEqual({r["hint_type"] for r in started.values()}, {"direct-tcp-v1", "relay-v1"})
        connections = [r for r in events if r["event"] == "connection_selected"]
        self.assertEqual(len(connections), 2)
        for r in connections:
            self.assertGreaterEqual(r["candidates"], 1)

    def check_traffic(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """Traffic records of one session: cumulative (never decreasing), the last one final
        and just before session_ended; returns it."""
        traffic = [r for r in events if r["event"] == "traffic"]
        self.assertGreaterEqual(len(traffic), 2)
        self.assertEqual([r["final"] for r in traffic], [False] * (len(traffic) - 1) + [True])
        self.assertEqual(events[-2]["event"], "traffic")
        for earlier, later in itertools.pairwise(traffic):
            for key in ("records_sent", "bytes_sent", "records_acked", "bytes_received"):
                self.assertLessEqual(earlier[key], later[key], key)
        return traffic[-1]


class TrafficIntervalSettingTests(SynchronousTestCase):
    def test_traffic_interval_from_environ(self) -> None:
        """TXDILATION_TRAFFIC_INTERVAL: unset or empty is the 60 s default, 0 disables the
        periodic records, a positive number is used; anything else is refused."""
        read = TelemetrySettings.from_environ
        self.assertEqual(read({}).traffic_interval, DEFAULT_TRAFFIC_INTERVAL)
        self.assertEqual(read({TRAFFIC_INTERVAL: " "}).traffic_interval, 60.0)
        self.assertIsNone(read({TRAFFIC_INTERVAL: "0"}).traffic_interval)
        self.assertEqual(read({TRAFFIC_INTERVAL: "2.5"}).traffic_interval, 2.5)
        for bad in ("-1", "soon", "inf", "nan"):
            self.assertRaises(ValueError, read, {TRAFFIC_INTERVAL: bad})
