"""The rendezvous one paired process keeps open: :data:`~.derive.SLOTS` per generation held.

Layer: pairing glue (owns :class:`~txdilation.pairing.lobby.Lobby` objects; the derivations are
:mod:`.derive`'s). :meth:`Lobbies.sync` makes the open lobbies match the generations a record
holds (opening the new ones, closing those of generations dropped for good) and posts this
process's hello in each; :meth:`Lobbies.post` posts an offer or an answer in the lobbies of one
generation. Every body delivered is unsealed with its generation's key and handed on, whatever
it is (the planner judges it); the same message arriving through several slots is handed on
once per slot (the planner drops repeats).

Invariants: at most :data:`~.derive.SLOTS` lobbies per generation; a lobby is closed (its side
closed on the server) only when its generation was dropped, never when the process merely stops
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
from txdilation.pairing.lobby import Lobby, LobbyCore, LobbyTrouble
from txdilation.pairing.record import Generation, PairingRecord

__all__ = ["Lobbies"]

_log = Logger()


class Lobbies:
    """The lobbies of one process (see the module docstring).

    :param reactor: the reactor.
    :param on_hello: called with every lobby message delivered (this process's own included).
    :param on_trouble: called with what went wrong with a lobby (it carries on by itself).
    """

    def __init__(
        self,
        reactor: Any,
        on_hello: Callable[[Hello], object],
        on_trouble: Callable[[LobbyTrouble], object],
    ) -> None:
        self._reactor = reactor
        self._on_hello = on_hello
        self._on_trouble = on_trouble
        self._open: dict[str, tuple[Generation, list[Lobby]]] = {}
        self._stopped = False

    def sync(self, record: PairingRecord, hello: Hello) -> None:
        """Lobbies for exactly the generations ``record`` holds; post ``hello`` in each."""
        if self._stopped:
            return
        held = record.held()
        fingerprints = {g.fingerprint for g in held}
        for fp in [fp for fp in self._open if fp not in fingerprints]:
            for lobby in self._open.pop(fp)[1]:
                lobby.close()
        for generation in held:
            if generation.fingerprint not in self._open:
                self._start(record, generation)
            self._post(generation.fingerprint, hello, hello=True)

    def post(self, fingerprint: str, message: Hello) -> None:
        """Post an offer or an answer in the lobbies of generation ``fingerprint``."""
        if not self._stopped:
            self._post(fingerprint, message, hello=False)

    def _post(self, fingerprint: str, message: Hello, *, hello: bool) -> None:
        entry = self._open.get(fingerprint)
        if entry is None:
            return
        key = derive.lobby_key(entry[0].secret)
        for lobby in entry[1]:
            lobby.post(seal(message, key), hello=hello)  # sealed apart: slots are not linkable

    def _start(self, record: PairingRecord, generation: Generation) -> None:
        secret, me = generation.secret, record.me.id
        lobbies = []
        for slot in range(derive.SLOTS):

            def place(round_: int, slot: int = slot) -> tuple[str, str]:
                return (
                    derive.lobby_mailbox(secret, slot, round_),
                    derive.lobby_side(secret, me, slot, round_),
                )

            lobby = Lobby(
                self._reactor,
                record.mailbox,
                LobbyCore(appid=record.appid, place=place),
                partial(self._body, derive.lobby_key(secret)),
                self._on_trouble,
            )
            lobbies.append(lobby)
        self._open[generation.fingerprint] = (generation, lobbies)
        for lobby in lobbies:
            lobby.start()

    def _body(self, key: bytes, body: str) -> None:
        if self._stopped:
            return
        try:
            hello = unseal(body, key)
        except BadHello as e:
            _log.debug("lobby: not a message of this pairing ({why})", why=str(e))
            return
        self._on_hello(hello)

    def stop(self) -> Deferred[Any]:
        """Disconnect every lobby (without closing them); fires once all are disconnected."""
        self._stopped = True
        stops = [lobby.stop() for _, lobbies in self._open.values() for lobby in lobbies]
        self._open.clear()
        return DeferredList(stops, consumeErrors=True)
