"""What ``w.dilate()`` returns (txdilation.mailbox.dilated): stock's three methods forward to the
multiplexer; txdilation's typed additions read the link (a Manager on a Clock, a fake link)."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from tests.mailbox.test_manager import _manager
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.records import Ping, Pong


class DilatedWormholeTests(SynchronousTestCase):
    def test_link_information_and_abort(self) -> None:
        """Before a selection: not connected, no RTT, abort_connection() does nothing. Once a
        link is selected: connected, the RTT of our PING once its PONG came back, and
        abort_connection() aborts the selected connection."""
        m, _pipe, clock = _manager("ffffffffffffffff")
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        please = {"type": "please", "side": "0000000000000000", "use-version": "ged"}
        m.received_dilation_message(json.dumps(please).encode())
        api = m.api
        self.assertEqual((api.connected, api.last_rtt), (False, None))
        api.abort_connection()
        connection = FakeDilatedConnection("->tcp:127.0.0.1:4001")
        link = m.connector_reports.link_for(connection)
        m.connector_reports.connector_connection_made(link, 1)
        self.assertTrue(api.connected)
        clock.advance(7.5)  # our first PING goes out a quarter interval after selection
        ping = connection.of_type(Ping)[-1]
        clock.advance(0.25)
        link.got_record(Pong(ping.ping_id))  # type: ignore[attr-defined]
        self.assertEqual(api.last_rtt, 0.25)
        self.assertFalse(connection.aborted)
        api.abort_connection()
        self.assertTrue(connection.aborted)
        m.stop()
