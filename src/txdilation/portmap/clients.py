"""Port mapping: the PCP and NAT-PMP clients (Twisted glue over the two codecs).

Each client maps one TCP port at the gateway (:meth:`map`, also a renewal when given the
mapping it renews) and deletes a mapping (:meth:`unmap`), one UDP exchange each
(:func:`txdilation.portmap.udp.exchange`; NAT-PMP asks for the external address first).

Invariants: a client fails with :class:`~txdilation.portmap.mapping.NoService` when nothing
answers its protocol (a PCP request answered in NAT-PMP's version counts as none) and with
:class:`~txdilation.portmap.mapping.MappingRefused` when the gateway says no; a renewal asks
for the same external port (PCP: with the same nonce, as RFC 6887 requires); :meth:`unmap`
never fails (a mapping that cannot be deleted runs out by itself).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from txdilation.portmap import natpmp, pcp
from txdilation.portmap.gateway import Gateway
from txdilation.portmap.mapping import (
    MappingError,
    MappingProtocol,
    MappingRefused,
    NoService,
    PortMapping,
)
from txdilation.portmap.udp import exchange

__all__ = ["NatPmpClient", "PcpClient"]

#: a deletion is tried twice within half a second: it must not hold up a stop
UNMAP_TRIES = (0.0, 0.2)
UNMAP_TIMEOUT = 0.5


class PcpClient:
    """PCP (RFC 6887) MAP requests to the gateway's port 5351."""

    protocol = MappingProtocol.PCP

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor

    async def map(
        self, gateway: Gateway, internal_port: int, lifetime: int, previous: PortMapping | None
    ) -> PortMapping:
        nonce = bytes.fromhex(previous.token[0]) if previous else os.urandom(pcp.NONCE_SIZE)
        suggested = previous.external_port if previous else internal_port
        request = pcp.map_request(gateway.local_address, nonce, internal_port, suggested, lifetime)

        def parse(data: bytes) -> pcp.MapResponse:
            try:
                return pcp.parse_map_response(data, nonce, internal_port)
            except pcp.WrongVersion:
                raise NoService("the gateway answers NAT-PMP, not PCP") from None

        answer = await _exchange(self._reactor, gateway, pcp.PCP_PORT, request, parse)
        if answer.result:
            what = pcp.RESULTS.get(answer.result, "unknown result")
            raise MappingRefused(self.protocol, answer.result, what)
        return PortMapping(
            self.protocol,
            gateway.local_address,
            internal_port,
            answer.external_address,
            answer.external_port,
            float(answer.lifetime),
            self._reactor.seconds(),
            (nonce.hex(),),
        )

    async def unmap(self, gateway: Gateway, mapping: PortMapping) -> None:
        nonce = bytes.fromhex(mapping.token[0])
        port = mapping.internal_port
        request = pcp.map_request(gateway.local_address, nonce, port, mapping.external_port, 0)
        await _quietly(
            self._reactor,
            gateway,
            pcp.PCP_PORT,
            request,
            lambda d: pcp.parse_map_response(d, nonce, port),
        )


class NatPmpClient:
    """NAT-PMP (RFC 6886) requests to the gateway's port 5351."""

    protocol = MappingProtocol.NAT_PMP

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor

    async def map(
        self, gateway: Gateway, internal_port: int, lifetime: int, previous: PortMapping | None
    ) -> PortMapping:
        address = await _exchange(
            self._reactor,
            gateway,
            natpmp.NATPMP_PORT,
            natpmp.address_request(),
            natpmp.parse_address_response,
        )
        if address.result:
            what = natpmp.RESULTS.get(address.result, "unknown result")
            raise MappingRefused(self.protocol, address.result, what)
        suggested = previous.external_port if previous else internal_port
        answer = await _exchange(
            self._reactor,
            gateway,
            natpmp.NATPMP_PORT,
            natpmp.map_request(internal_port, suggested, lifetime),
            lambda d: natpmp.parse_map_response(d, internal_port),
        )
        if answer.result:
            what = natpmp.RESULTS.get(answer.result, "unknown result")
            raise MappingRefused(self.protocol, answer.result, what)
        return PortMapping(
            self.protocol,
            gateway.local_address,
            internal_port,
            address.external_address,
            answer.external_port,
            float(answer.lifetime),
            self._reactor.seconds(),
        )

    async def unmap(self, gateway: Gateway, mapping: PortMapping) -> None:
        port = mapping.internal_port
        await _quietly(
            self._reactor,
            gateway,
            natpmp.NATPMP_PORT,
            natpmp.map_request(port, 0, 0),
            lambda d: natpmp.parse_map_response(d, port),
        )


async def _exchange(reactor: Any, gateway: Gateway, port: int, request: bytes, parse: Any) -> Any:
    return await exchange(reactor, gateway.address, port, request, parse)


async def _quietly(reactor: Any, gateway: Gateway, port: int, request: bytes, parse: Any) -> None:
    with contextlib.suppress(MappingError):  # (the lease runs out by itself)
        await exchange(
            reactor, gateway.address, port, request, parse, tries=UNMAP_TRIES, timeout=UNMAP_TIMEOUT
        )
