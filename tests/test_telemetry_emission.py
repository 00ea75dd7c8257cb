"""Telemetry from a real dilation: two Managers over real loopback TCP (in-memory mailbox),
one forced reconnect, events written through TXDILATION_EVENTS and checked against the schema."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.internet.protocol import Factory

from txdilation import telemetry as tm

from .test_manager import Collector, DilatedPairBase, EchoProtocol

try:
    import jsonschema
except ImportError:  # pragma: no cover (jsonschema comes with the analytics extra)
    jsonschema = None


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
        first = dilators[1]._manager._connection
        first.disconnect()
        client.transport.write(b"!")
        yield client.wait_for(15)
        for d in dilators:
            d.stop()
        for t in self._terms:
            yield t.stopped
        with open(self.path, encoding="utf-8") as f:
            text = f.read()
        records = [json.loads(line) for line in text.splitlines()]
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
        for forbidden in ("secret-payload", "127.0.0.1", dilators[0]._manager._my_side):
            self.assertNotIn(forbidden, text)
