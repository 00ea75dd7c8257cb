"""``dilation:`` Twisted endpoints: serve or connect over a subchannel of a dilated wormhole.

Layer: application edge (Twisted endpoint API over the public wormhole API; the endpoint-string
parsers in ``twisted/plugins/txdilation_endpoints.py`` build these; :mod:`.settings` checks
the strings, :mod:`.shared` holds the wormholes). Any Twisted program that
takes an endpoint string can then use Dilation without code::

    twistd -n web --path . --listen 'dilation:subprotocol=http:code-file=code.txt'
    clientFromString(reactor, "dilation:subprotocol=http:code=7-guitarist-revenge")

A :class:`DilationServerEndpoint` listens for the subchannels named ``subprotocol`` that the
peer opens (one ``IListeningPort`` per subprotocol); a :class:`DilationClientEndpoint` opens
one subchannel per ``connect()``. Settings (endpoint-string keys, see :func:`parse_settings`
and docs/endpoints.md): ``subprotocol`` (required), ``mailbox``, ``appid``, ``code`` (else a
code is allocated and reported in the log and, with ``code-file``, in that file), ``relay``,
``no-listen``, ``ping-interval``, ``status`` (JSON-line status events, as a session's),
``pairing`` (a pairing file: meet again without a code after restarts, :mod:`.paired`) and, for
clients, ``timeout``.

Invariants:

- endpoints naming the same wormhole (same reactor, mailbox, appid and ``code``; or, for an
  allocated code, the same ``code-file``) share ONE wormhole and dilation: their dilation
  settings must agree (``ValueError`` otherwise); nothing is created before ``listen()`` or
  ``connect()`` (parsing an endpoint string has no effect);
- subchannels have TWISTED semantics (``connectionLost`` gets a ``Failure``, a close reaches
  open protocols, ...), since the protocols are Twisted programs' own;
- ``listen()`` fires once the code is known (allocated or given), before the peer comes; it
  fails if the wormhole fails first (mailbox unreachable); the port serves as soon as the
  wormhole is dilated; one subprotocol is listened for at most once per wormhole;
- a wormhole is closed when its last listening port stops listening and no client used it, or
  when the reactor shuts down (the peer hears that we left); a wormhole that ends by itself
  (wrong code, the peer left) is forgotten, with a fatal ``error`` (in words, with advice) or
  the peer's departure in the log;
- what happens is logged as a session's status lines (namespace ``txdilation.endpoints``): the
  code, the verifier, ``dilated`` with the path, reconnections, errors with advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError, succeed
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.endpoints.settings import (
    DEFAULT_APPID,
    DEFAULT_CLIENT_TIMEOUT,
    EndpointSettings,
    parse_settings,
)
from txdilation.endpoints.shared import NAMESPACE, SharedWormhole, acquire, pass_to
from txdilation.session.advice import unwrap

_log = Logger(namespace=NAMESPACE)

__all__ = [
    "DEFAULT_APPID",
    "DEFAULT_CLIENT_TIMEOUT",
    "NAMESPACE",
    "DilationAddress",
    "DilationClientEndpoint",
    "DilationListeningPort",
    "DilationServerEndpoint",
    "EndpointSettings",
    "parse_settings",
]


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
            return _failed(e)
        if settings.subprotocol in shared.listening:
            return _failed(
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

        def failed(f: Failure) -> Failure:
            port.stopListening()
            return f

        d: Deferred[Any] = Deferred()
        shared.code_known.addBoth(pass_to(d))
        d.addCallbacks(code_known, failed)
        return d


def _quiet_when_closed(f: Failure) -> None:
    """A listener that ends with its wormhole (closed, cancelled) is not an error to log: the
    wormhole's own end says why."""
    name = type(unwrap(f)).__name__
    if name not in ("WormholeClosedError", "CancelledError"):
        _log.failure("dilation: listening failed", f)


def _failed(error: Exception) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.errback(error)
    return d


@implementer(IStreamClientEndpoint)
class DilationClientEndpoint:
    """Opens subchannels of one subprotocol of a dilated wormhole (see the module docstring)."""

    def __init__(self, reactor: Any, settings: EndpointSettings) -> None:
        self._reactor = reactor
        self.settings = settings

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Open a subchannel named ``subprotocol`` (once the wormhole is dilated) and connect
        ``protocolFactory``'s protocol to it.

        :returns: a Deferred firing with the protocol; it fails with ``TimeoutError`` after
            ``timeout`` seconds without a dilated wormhole, or with the reason the wormhole
            ended (e.g. ``WrongPasswordError``); cancelling it stops waiting.
        """
        settings = self.settings
        try:
            shared = acquire(self._reactor, settings)
        except ValueError as e:
            return _failed(e)
        shared.clients += 1
        d: Deferred[Any] = shared.dilated.connector_for(settings.subprotocol).connect(
            protocolFactory
        )
        if settings.timeout is not None:
            d.addTimeout(settings.timeout, self._reactor)

        def explain_failure(f: Failure) -> Failure:
            if f.check(TimeoutError):  # type: ignore[no-untyped-call]
                state = shared.observer.state.state
                raise TimeoutError(
                    f"dilation: no dilated wormhole after {settings.timeout} s (link: {state}; "
                    f"code {shared.code or 'not known yet'}); is the other side running, with "
                    "the same mailbox, appid and code?"
                ) from None
            if type(unwrap(f)).__name__ == "WormholeClosedError":
                # not the cause: the close of the wormhole says why it ended
                closed = shared.closed_under_us()
                closed.addBoth(lambda _: shared.cause if shared.cause is not None else f)
                return closed  # type: ignore[return-value]
            return f

        d.addErrback(explain_failure)
        return d
