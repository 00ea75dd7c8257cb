"""
txdilation's port mapper on its own, run inside a namespace behind a NAT:
``python -m tests.support.portmap_client [--protocols P,Q] [--lifetime S] [--hold S]``.

Layer: test infrastructure. It listens on a TCP port (accepting and closing connections, as a
direct-hint listener would be reached), asks ``txdilation.portmap.mapper.PortMapper`` to map it
with the protocols given (default: all, in the library's order), and prints one JSON line per
change the mapper reports (``{"change": "mapped", "protocol": ..., "external": [host, port],
"lifetime": s, "t": s}``; ``lifetime`` is null for a permanent lease), ``{"accepted": [host,
port]}`` for each connection that reached the listener, then, ``--hold`` seconds after the
start, stops the mapper and prints ``{"stopped": true, "t": s}`` once it is done, and exits.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.protocol import Factory, Protocol

from txdilation.portmap.clients import NatPmpClient, PcpClient
from txdilation.portmap.mapper import IMappingClient, PortMapper
from txdilation.portmap.mapping import PortMapping
from txdilation.portmap.upnp import UpnpClient

reactor: Any = _reactor
STARTED = time.monotonic()


def emit(**fields: Any) -> None:
    print(json.dumps({**fields, "t": round(time.monotonic() - STARTED, 3)}), flush=True)


class Printer:
    def port_mapping_changed(self, change: str, mapping: PortMapping | None) -> None:
        if mapping is None:
            emit(change=change)
            return
        lifetime = None if math.isinf(mapping.lifetime) else mapping.lifetime
        emit(
            change=change,
            protocol=mapping.protocol.value,
            external=[mapping.external_address, mapping.external_port],
            internal=[mapping.internal_address, mapping.internal_port],
            lifetime=lifetime,
        )


class Accepted(Protocol):
    def connectionMade(self) -> None:
        peer = self.transport.getPeer()  # type: ignore[union-attr]
        emit(accepted=[peer.host, peer.port])
        self.transport.loseConnection()  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="portmap_client")
    p.add_argument("--protocols", default="pcp,nat-pmp,upnp-igd")
    p.add_argument("--lifetime", type=int, default=7200)
    p.add_argument("--hold", type=float, default=3.0)
    args = p.parse_args(argv)
    clients: dict[str, IMappingClient] = {
        "pcp": PcpClient(reactor),
        "nat-pmp": NatPmpClient(reactor),
        "upnp-igd": UpnpClient(reactor),
    }
    chosen = [clients[name] for name in args.protocols.split(",")]
    mapper = PortMapper(reactor, observer=Printer(), clients=chosen, lifetime=args.lifetime)
    port = reactor.listenTCP(0, Factory.forProtocol(Accepted))
    emit(listening=port.getHost().port)
    mapper.map(port.getHost().port, lambda mapping: None)

    def stop() -> None:
        d = mapper.stop()
        d.addCallback(lambda _: emit(stopped=True))
        d.addBoth(lambda _: reactor.stop())

    reactor.callLater(args.hold, stop)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
