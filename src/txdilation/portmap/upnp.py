"""Port mapping: the UPnP IGD client (Twisted glue over :mod:`.ssdp` and :mod:`.igd`).

:meth:`UpnpClient.map` finds the gateway's Internet Gateway Device (an SSDP M-SEARCH to the
group and to the gateway, then its description over HTTP), asks ``GetExternalIPAddress`` and
maps the port: ``AddAnyPortMapping`` on IGD v2, else ``AddPortMapping`` (the internal port,
then once another if it is taken; a permanent lease where only those are kept); a renewal
repeats ``AddPortMapping``. :meth:`UpnpClient.unmap` is ``DeletePortMapping``.

Invariants: only the gateway's own answers count (the codecs refuse others); every HTTP
exchange ends within :data:`HTTP_TIMEOUT` and reads at most ``igd.MAX_DOCUMENT`` bytes;
failures are ``NoService`` (no device, HTTP or protocol trouble) or ``MappingRefused`` (a UPnP
error); :meth:`unmap` never fails.
"""

from __future__ import annotations

import contextlib
import random
from io import BytesIO
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import DatagramProtocol, Protocol
from twisted.python.failure import Failure

from txdilation.portmap import igd, ssdp
from txdilation.portmap.gateway import Gateway
from txdilation.portmap.mapping import (
    MappingError,
    MappingProtocol,
    MappingRefused,
    NoService,
    PortMapping,
)

__all__ = ["HTTP_TIMEOUT", "SEARCH_TIMEOUT", "UpnpClient"]

SEARCH_TRIES = (0.0, 0.5)
SEARCH_TIMEOUT = 1.5
HTTP_TIMEOUT = 2.0
DESCRIPTION = "txdilation"
PERMANENT = float("inf")


class UpnpClient:
    """UPnP IGD port mappings at the gateway (see the module docstring)."""

    protocol = MappingProtocol.UPNP_IGD

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor

    async def map(
        self, gateway: Gateway, internal_port: int, lifetime: int, previous: PortMapping | None
    ) -> PortMapping:
        if previous is not None:
            service = igd.Service(previous.token[0], previous.token[1])
        else:
            location = await _search(self._reactor, gateway.address)
            description = await self._http(b"GET", location)
            try:
                service = igd.find_service(description, location)
            except igd.IgdError as e:
                raise NoService(str(e)) from None
        external = await self._call(service, "GetExternalIPAddress", {})
        address = external.get("NewExternalIPAddress", "")
        arguments: dict[str, str | int] = {
            "NewRemoteHost": "",
            "NewExternalPort": previous.external_port if previous else internal_port,
            "NewProtocol": "TCP",
            "NewInternalPort": internal_port,
            "NewInternalClient": gateway.local_address,
            "NewEnabled": 1,
            "NewPortMappingDescription": DESCRIPTION,
            "NewLeaseDuration": lifetime,
        }
        granted = float(lifetime)
        port = int(arguments["NewExternalPort"])
        if previous is None and service.version >= 2:
            try:
                answer = await self._call(service, "AddAnyPortMapping", arguments)
                port = int(answer.get("NewReservedPort", "0") or 0) or port
                return self._mapping(gateway, service, internal_port, address, port, granted)
            except MappingRefused as e:
                if e.code != igd.INVALID_ACTION:
                    raise
        for _ in range(3):
            try:
                await self._call(service, "AddPortMapping", {**arguments, "NewExternalPort": port})
                return self._mapping(gateway, service, internal_port, address, port, granted)
            except MappingRefused as e:
                if e.code == igd.ONLY_PERMANENT_LEASES and arguments["NewLeaseDuration"]:
                    arguments["NewLeaseDuration"], granted = 0, PERMANENT
                elif e.code == igd.CONFLICT_IN_MAPPING and previous is None:
                    port = random.randint(1024, 65535)
                else:
                    raise
        raise NoService("UPnP: no port could be mapped")

    def _mapping(
        self,
        gateway: Gateway,
        service: igd.Service,
        internal_port: int,
        address: str,
        port: int,
        lifetime: float,
    ) -> PortMapping:
        return PortMapping(
            self.protocol,
            gateway.local_address,
            internal_port,
            address,
            port,
            lifetime,
            self._reactor.seconds(),
            (service.service_type, service.control_url),
        )

    async def unmap(self, gateway: Gateway, mapping: PortMapping) -> None:
        service = igd.Service(mapping.token[0], mapping.token[1])
        arguments: dict[str, str | int] = {
            "NewRemoteHost": "",
            "NewExternalPort": mapping.external_port,
            "NewProtocol": "TCP",
        }
        with contextlib.suppress(MappingError):  # (the lease runs out by itself)
            await self._call(service, "DeletePortMapping", arguments)

    async def _call(
        self, service: igd.Service, action: str, arguments: dict[str, str | int]
    ) -> dict[str, str]:
        headers, body = igd.soap_request(service, action, arguments)
        answer = await self._http(b"POST", service.control_url, headers, body, faults_ok=True)
        try:
            return igd.parse_soap_response(answer, action)
        except igd.SoapFault as e:
            raise MappingRefused(self.protocol, e.code, str(e)) from None
        except igd.IgdError as e:
            raise NoService(str(e)) from None

    async def _http(
        self,
        method: bytes,
        url: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        faults_ok: bool = False,
    ) -> bytes:
        """The body of the answer to one HTTP request (a SOAP fault comes with a 500)."""
        from twisted.web.client import Agent, FileBodyProducer
        from twisted.web.http_headers import Headers

        agent = Agent(self._reactor, connectTimeout=HTTP_TIMEOUT)  # type: ignore[no-untyped-call]
        fields = Headers({k.encode(): [v.encode()] for k, v in (headers or {}).items()})
        producer = FileBodyProducer(BytesIO(body)) if body is not None else None  # type: ignore[no-untyped-call]
        d = agent.request(method, url.encode("ascii"), fields, producer)
        d.addTimeout(HTTP_TIMEOUT, self._reactor)
        try:
            response = await d
            if response.code != 200 and not (faults_ok and response.code == 500):
                raise NoService(f"HTTP {response.code} from {url[:80]}")
            return await _read_body(self._reactor, response)
        except MappingError:
            raise
        except Exception as e:
            raise NoService(f"HTTP {method.decode()} {url[:80]}: {e}") from None


class _BoundedBody(Protocol):
    def __init__(self, done: Deferred[bytes]) -> None:
        self._done = done
        self._chunks: list[bytes] = []
        self._size = 0

    def dataReceived(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > igd.MAX_DOCUMENT:
            if not self._done.called:
                self._done.errback(NoService("UPnP document too long"))
            self.transport.stopProducing()  # type: ignore[union-attr]
            return
        self._chunks.append(data)

    def connectionLost(self, reason: Failure | None = None) -> None:  # type: ignore[override]
        if not self._done.called:
            self._done.callback(b"".join(self._chunks))


async def _read_body(reactor: Any, response: Any) -> bytes:
    done: Deferred[bytes] = Deferred()
    response.deliverBody(_BoundedBody(done))
    done.addTimeout(HTTP_TIMEOUT, reactor)
    return await done


class _Search(DatagramProtocol):
    """M-SEARCH to the SSDP group and to the gateway; the gateway's first usable answer."""

    def __init__(self, gateway: str, done: Deferred[str]) -> None:
        self._gateway = gateway
        self._done = done

    def send(self) -> None:
        request = ssdp.search_request()
        for address in (ssdp.SSDP_GROUP, self._gateway):
            with contextlib.suppress(OSError):  # no multicast route: unicast may still do
                self.transport.write(request, (address, ssdp.SSDP_PORT))  # type: ignore[union-attr]

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        try:
            location = ssdp.parse_search_response(datagram, addr[0])
        except ssdp.SsdpError:
            return
        if addr[0] == self._gateway and not self._done.called:
            self._done.callback(location)


async def _search(reactor: Any, gateway: str) -> str:
    done: Deferred[str] = Deferred()
    protocol = _Search(gateway, done)
    try:
        port = reactor.listenUDP(0, protocol)
    except OSError as e:
        raise NoService(f"no UDP socket: {e}") from None
    timers: list[IDelayedCall] = [reactor.callLater(t, protocol.send) for t in SEARCH_TRIES]

    def give_up() -> None:
        if not done.called:
            done.errback(NoService(f"no UPnP gateway answered within {SEARCH_TIMEOUT} s"))

    timers.append(reactor.callLater(SEARCH_TIMEOUT, give_up))
    try:
        return await done
    finally:
        for timer in timers:
            if timer.active():
                timer.cancel()
        port.stopListening()
