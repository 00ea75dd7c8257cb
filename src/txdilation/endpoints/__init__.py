"""``dilation:`` Twisted endpoints: serve or connect over a subchannel of a dilated wormhole.

Layer: application edge (Twisted endpoint API over the public wormhole API; the endpoint-string
parsers in ``twisted/plugins/txdilation_endpoints.py`` build these; :mod:`.settings` checks
the strings, :mod:`.shared` holds the wormholes, :mod:`.registry` shares them). Any
Twisted program that takes an endpoint string can then use Dilation without code::

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

import os
import sys
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, succeed
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

from txdilation.endpoints.registry import acquire
from txdilation.endpoints.settings import (
    DEFAULT_APPID,
    DEFAULT_CLIENT_TIMEOUT,
    EndpointSettings,
    parse_settings,
)
from txdilation.endpoints.shared import NAMESPACE, SharedWormhole, in_twistd
from txdilation.session.advice import explain, unwrap
from txdilation.session.config import DEFAULT_MAILBOX, MAILBOX_VARIABLE
from txdilation.wire.errors import WormholeClosedError
from txdilation.wire.waiting import pass_to

_log = Logger(namespace=NAMESPACE)

__all__ = [
    "DEFAULT_APPID",
    "DEFAULT_CLIENT_TIMEOUT",
    "EXIT_USAGE",
    "NAMESPACE",
    "DilationAddress",
    "DilationClientEndpoint",
    "DilationListeningPort",
    "DilationServerEndpoint",
    "EndpointSettings",
    "in_words",
    "parse_settings",
    "settings_from_string",
]

EXIT_USAGE = 2
"""A ``twistd`` server given a bad ``dilation:`` string exits with this status (one line)."""


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

        def failed(f: Failure) -> Failure | Deferred[Any]:
            port.stopListening()
            if shared.exiting:  # the error is logged and the process ends: no traceback
                return Deferred()
            return f

        d: Deferred[Any] = Deferred()
        shared.code_known.addBoth(pass_to(d))
        d.addCallbacks(code_known, failed)
        return d


def in_words(error: BaseException | Failure, *, mailbox_setting: str = "mailbox=") -> str:
    """Why a ``dilation:`` endpoint's ``listen()`` or ``connect()`` (or any wormhole) failed,
    and what to do, in one line (for a program to print instead of a traceback).

    :param mailbox_setting: how the advice names the mailbox setting (a program's option).
    """
    exc = unwrap(error)
    if isinstance(exc, TimeoutError) and str(exc).startswith("dilation: "):
        return str(exc)  # says how far the wormhole got, and what to check
    explained = explain(exc, mailbox_setting=mailbox_setting)
    return f"{explained.message}; {explained.advice}" if explained.advice else explained.message


def settings_from_string(
    reactor: Any, args: tuple[str, ...], kwargs: dict[str, str], *, client: bool
) -> EndpointSettings:
    """:func:`parse_settings` for the endpoint-string plugins (the mailbox server, when the
    string names none: ``TXDILATION_MAILBOX``, else the public one): a bad string is a
    ``ValueError`` naming the key (also for a ``status`` or ``code-file`` whose directory does
    not exist), except while a ``twistd`` server is being set up (its
    ``--listen``/``--connect`` options), where it is ONE line on stderr and exit status
    :data:`EXIT_USAGE`, not twistd's traceback.
    """
    default_mailbox = os.environ.get(MAILBOX_VARIABLE) or DEFAULT_MAILBOX
    try:
        settings = parse_settings(args, kwargs, client=client, default_mailbox=default_mailbox)
        for key, path in (("status", settings.status), ("code-file", settings.code_file)):
            directory = os.path.dirname(os.path.abspath(path)) if path else None
            if directory is not None and not os.path.isdir(directory):
                raise ValueError(f"dilation: {key}={path}: no directory {directory}")
        return settings
    except ValueError as e:
        if not (in_twistd() and not getattr(reactor, "running", False)):
            raise
        sys.stderr.write(f"twistd: error: {e}; docs/endpoints.md lists the keys\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_USAGE) from None


def _quiet_when_closed(f: Failure) -> None:
    """A listener that ends with its wormhole (closed, cancelled) is not an error to log: the
    wormhole's own end says why."""
    if not isinstance(unwrap(f), WormholeClosedError | CancelledError):
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

        :returns: a Deferred firing with the protocol; it fails as soon as the wormhole
            fails, with the reason (e.g. ``ServerConnectionError``: the mailbox server cannot
            be reached, ``WrongPasswordError``: a wrong code; the message in words, with
            advice), or with ``TimeoutError`` after ``timeout`` seconds, saying how far the
            wormhole got (no code, nobody joined with the code, no connection);
            cancelling it stops waiting.
        """
        settings = self.settings
        try:
            shared = acquire(self._reactor, settings)
        except ValueError as e:
            return _failed(e)
        shared.clients += 1
        timeout = settings.timeout
        _log.info(
            "dilation: opening a {subprotocol} subchannel (code {code}), waiting {wait} for "
            "the peer",
            subprotocol=settings.subprotocol,
            code=shared.code or "not known yet",
            wait=f"up to {timeout:g} s" if timeout is not None else "without a time limit",
        )
        inner: Deferred[Any] = shared.dilated.connector_for(settings.subprotocol).connect(
            protocolFactory
        )
        d: Deferred[Any] = Deferred(lambda _: inner.cancel())
        inner.addBoth(pass_to(d))
        shared.watch(d)  # the wormhole's failure, in words, as soon as it happens
        if timeout is not None:
            d.addTimeout(timeout, self._reactor)

        def explain_failure(f: Failure) -> Failure:
            if f.check(TimeoutError):  # type: ignore[no-untyped-call]
                raise TimeoutError(_waited_too_long(shared, timeout)) from None
            if isinstance(unwrap(f), WormholeClosedError):
                # not the cause: the close of the wormhole says why it ended
                closed = shared.closed_under_us()
                closed.addBoth(lambda _: shared.cause if shared.cause is not None else f)
                return closed  # type: ignore[return-value]
            return f

        d.addErrback(explain_failure)
        return d


def _waited_too_long(shared: SharedWormhole, timeout: float | None) -> str:
    """Why a client's ``connect()`` timed out, from how far the wormhole got."""
    settings = shared.settings
    waited = f"within {timeout:g} s (timeout={timeout:g})"
    if shared.code is None:
        return (
            f"dilation: no wormhole code {waited}: the mailbox server {settings.mailbox} did "
            "not answer; check mailbox= and that the server is running"
        )
    if not shared.peer_joined:
        nameplate = shared.code.split("-", 1)[0]
        return (
            f"dilation: nobody joined with code {shared.code} {waited}: is the code right "
            f"(nameplate {nameplate} may be unknown to the mailbox server: a code is "
            "allocated by the other side and works once), and is the other side running, "
            "with the same mailbox= and appid=?"
        )
    return (
        f"dilation: the peer joined (code {shared.code}) but no connection was made {waited} "
        f"(link: {shared.observer.state.state}): check that one side can reach the other, or "
        "give both sides a relay (relay=tcp\\:HOST\\:PORT)"
    )
