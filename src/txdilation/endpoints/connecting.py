"""The client side of ``dilation:`` endpoints: open subchannels of a shared wormhole.

Layer: application edge. A :class:`DilationClientEndpoint` opens one subchannel named
``subprotocol`` per ``connect()``, once the wormhole is dilated.

Invariants: nothing is created before ``connect()``; ``connect()`` fails as soon as the
wormhole fails (the reason in words, with advice), or after ``timeout`` seconds saying how far
the wormhole got; a wormhole closed under it fails it with the close's cause.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, TimeoutError, fail
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
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

__all__ = ["DilationClientEndpoint"]


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
            return fail(e)
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
