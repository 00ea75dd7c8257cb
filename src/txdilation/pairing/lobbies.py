"""The lobbies one paired side keeps open: one per generation it holds.

Layer: pairing glue (owns :class:`~txdilation.pairing.lobby.Lobby` objects; the derivations are
:mod:`.derive`'s). :meth:`Lobbies.sync` makes the open lobbies match the generations a record
holds (opening the new ones, closing those of generations dropped for good) and posts this
side's new hello in each; every hello delivered in any of them is unsealed with its lobby's key
and handed on, whatever it is (the planner judges it).

Invariants: at most one lobby per generation; a lobby is closed (its mailbox side closed on the
server) only when its generation was dropped, never when the process merely stops
(:meth:`Lobbies.stop` disconnects): the next process of this side comes back to it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from txdilation.pairing import derive
from txdilation.pairing.hello import BadHello, Hello, seal, unseal
from txdilation.pairing.lobby import Lobby, LobbyCore
from txdilation.pairing.record import Generation, PairingRecord

__all__ = ["Lobbies"]

_log = Logger(namespace="txdilation.pairing.lobbies")


class Lobbies:
    """The lobbies of one side (see the module docstring).

    :param reactor: the reactor.
    :param on_hello: called with every hello delivered (this side's own included).
    :param on_error: called with the server's words when it refuses a lobby.
    """

    def __init__(
        self,
        reactor: Any,
        on_hello: Callable[[Hello], object],
        on_error: Callable[[str], object],
    ) -> None:
        self._reactor = reactor
        self._on_hello = on_hello
        self._on_error = on_error
        self._open: dict[str, Lobby] = {}
        self._stopped = False

    def sync(self, record: PairingRecord, hello: Hello) -> None:
        """Lobbies for exactly the generations ``record`` holds; post ``hello`` in each."""
        if self._stopped:
            return
        held = record.held()
        fingerprints = {g.fingerprint for g in held}
        for fp in [fp for fp in self._open if fp not in fingerprints]:
            self._open.pop(fp).close()
        for generation in held:
            lobby = self._open.get(generation.fingerprint)
            if lobby is None:
                lobby = self._start(record, generation)
            lobby.post(seal(hello, derive.hello_key(generation.secret)))

    def _start(self, record: PairingRecord, generation: Generation) -> Lobby:
        secret = generation.secret
        core = LobbyCore(
            appid=record.appid,
            side=derive.lobby_side(secret, record.me.id),
            mailbox=derive.lobby_mailbox(secret),
        )
        lobby = Lobby(
            self._reactor,
            record.mailbox,
            core,
            partial(self._body, derive.hello_key(secret)),
            self._on_error,
        )
        self._open[generation.fingerprint] = lobby
        lobby.start()
        return lobby

    def _body(self, key: bytes, side: str, body: str) -> None:
        if self._stopped:
            return
        try:
            hello = unseal(body, key)
        except BadHello as e:
            _log.debug("lobby: not a hello of this pairing ({why})", why=str(e))
            return
        self._on_hello(hello)

    def stop(self) -> Deferred[Any]:
        """Disconnect every lobby (without closing them); fires once all are disconnected."""
        self._stopped = True
        stops = [lobby.stop() for lobby in self._open.values()]
        self._open.clear()
        return DeferredList(stops, consumeErrors=True)
