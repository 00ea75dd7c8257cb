"""The real mailbox server and transit relay in-process on 127.0.0.1, for applications' tests.

The same objects as :mod:`txdilation.loopback_servers` (which the shipped demo uses), under
the name the test helpers have always given them; see that module for how to start and stop
them.
"""

from __future__ import annotations

from txdilation.loopback_servers import (
    LOOPBACK,
    MailboxServer,
    TransitRelay,
    start_mailbox_server,
    start_transit_relay,
)

__all__ = [
    "LOOPBACK",
    "MailboxServer",
    "TransitRelay",
    "start_mailbox_server",
    "start_transit_relay",
]
