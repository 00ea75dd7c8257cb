"""The server side of ``dilation:`` endpoints: listen for a subprotocol of a shared wormhole.

Layer: application edge. A :class:`DilationServerEndpoint` serves the subchannels named
``subprotocol`` that the peer opens, one :class:`DilationListeningPort` per subprotocol.

Invariants: nothing is created before ``listen()``; ``listen()`` fires once the code is known
(allocated or given), before the peer comes, and fails if the wormhole fails first (mailbox
unreachable); the port serves as soon as the wormhole is dilated; one subprotocol is listened
for at most once per wormhole; the wormhole closes when its last port stops listening and no
client used it (:mod:`.shared`, :mod:`.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    IProtocolFactory,
    IStreamServerEndpoint,
)
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.endpoints.endpoint_settings import EndpointSettings
from txdilation.endpoints.registry import acquire
from txdilation.endpoints.shared import NAMESPACE, SharedWormhole
from txdilation.reporting.advice import unwrap
from txdilation.wire.dilation_errors import WormholeClosedError
from txdilation.wire.waiting import pass_to

_log = Logger(namespace=NAMESPACE)

__all__ = ["DilationAddress", "DilationListeningPort", "DilationServerEndpoint"]


@implementer(IAddress)
@dataclass(frozen=True, slots=True)
class DilationAddress:
    """Where a ``dilation:`` port listens: a subprotocol of the wormhole with ``code``."""

    subprotocol: str
    code: str | None


@implementer(IListeningPort)
class DilationListeningPort:
    """Serves the subchannels named ``subprotocol`` of a shared wormhole."""

    def __init__(self, shared: SharedWormhole, subprotocol: str, inner: Deferred[Any]) -> None:
        self._shared = shared
        self._subprotocol = subprotocol
        self._inner = inner
        self._stopped = False

    def startListening(self) -> None:
        """Already listening (``listen()`` started it)."""

    def stopListening(self) -> Deferred[Any]:
        """Stop serving the subprotocol; the wormhole closes if nothing else uses it."""
        if self._stopped:
            return succeed(None)
        self._stopped = True
        inner = self._inner
        if not inner.called:
            inner.cancel()
            inner.addErrback(lambda f: None)
        else:
            inner.addCallback(lambda port: port.stopListening() if port else None)
            inner.addErrback(lambda f: None)
        return self._shared.release_port(self._subprotocol)

    def getHost(self) -> DilationAddress:
        """The subprotocol and the wormhole's code."""
        return DilationAddress(self._subprotocol, self._shared.code)


@implementer(IStreamServerEndpoint)
class DilationServerEndpoint:
    """Listens for one subprotocol of a dilated wormhole (see the module docstring)."""

    def __init__(self, reactor: Any, settings: EndpointSettings) -> None:
        self._reactor = reactor
        self.settings = settings

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        """Serve the peer's subchannels named ``subprotocol`` with ``protocolFactory``.

        :returns: a Deferred firing with the port once the code is known; it fails with the
            wormhole's error if the wormhole fails first, with ``ValueError`` if this wormhole
            already serves that subprotocol or endpoints sharing it disagree.
        """
        settings = self.settings
        try:
            shared = acquire(self._reactor, settings)
        except ValueError as e:
            return fail(e)
        if settings.subprotocol in shared.listening:
            return fail(
                ValueError(f"dilation: already listening for {settings.subprotocol!r} here")
            )
        shared.listening.add(settings.subprotocol)
        shared.ports += 1
        inner: Deferred[Any] = shared.dilated.listener_for(settings.subprotocol).listen(
            protocolFactory
        )
        inner.addErrback(_quiet_when_closed)
        port = DilationListeningPort(shared, settings.subprotocol, inner)

        def code_known(code: str) -> DilationListeningPort:
            _log.info(
                "serving subprotocol {subprotocol} on the wormhole with code {code}",
                subprotocol=settings.subprotocol,
                code=code,
            )
            return port

        def failed(f: Failure) -> Failure | Deferred[Any]:
            port.stopListening()
            if shared.exiting:  # the error is logged and the process ends: no traceback
                return Deferred()
            return f

        d: Deferred[Any] = Deferred()
        shared.code_known.addBoth(pass_to(d))
        d.addCallbacks(code_known, failed)
        return d


def _quiet_when_closed(f: Failure) -> None:
    """A listener that ends with its wormhole (closed, cancelled) is not an error to log: the
    wormhole's own end says why."""
    if not isinstance(unwrap(f), WormholeClosedError | CancelledError):
        _log.failure("dilation: listening failed", f)
