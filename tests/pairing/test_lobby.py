"""A rendezvous's protocol core: bind, open and a ping on each connection; this process's hello
and latest offers or answers posted again on every connection that finds the mailbox without
them; trouble (an error such as ``crowded``, too many messages) moves it to the next round, a
mailbox and side nobody who saw this one can tell; a refusing server does not."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing import derive
from txdilation.pairing.hello import BODY_LENGTH, PHASE
from txdilation.pairing.lobby import KEPT, MAX_MESSAGES, LobbyCore

SECRET, ME = b"s" * 32, b"m" * 16


def place(round_: int) -> tuple[str, str]:
    return derive.lobby_mailbox(SECRET, 0, round_), derive.lobby_side(SECRET, ME, 0, round_)


def body(n: int) -> str:
    return f"{n:x}".rjust(BODY_LENGTH, "0")


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "phase": PHASE, "side": "x", "body": text}


class LobbyCoreTests(SynchronousTestCase):
    def test_connection_and_kept_messages(self) -> None:
        """Each connection binds, opens and pings; what was posted while disconnected, or is
        missing from the mailbox's history (the pong ends it), is added; what the history holds
        is not added again; only the latest KEPT offers or answers are kept."""
        core = LobbyCore(appid="a", place=place)
        core.post(body(1), hello=True)
        for n in range(2, 3 + KEPT):
            core.post(body(n), hello=False)
        self.assertEqual(core.take(), [])
        core.opened()
        kinds = [m["type"] for m in core.take()]
        self.assertEqual(kinds, ["bind", "open", "ping"])
        self.assertEqual(core.message(message(body(1))), (body(1), None))
        core.message({"type": "pong"})
        added = [m["body"] for m in core.take() if m["type"] == "add"]
        self.assertEqual(added, [body(n) for n in range(3, 3 + KEPT)])
        core.post(body(99), hello=False)
        self.assertEqual([m["body"] for m in core.take()], [body(99)])

    def test_trouble_moves_to_the_next_round(self) -> None:
        """``crowded`` (any server error) and more than MAX_MESSAGES messages are the mailbox's
        trouble: the next round is another mailbox and side; a welcome error is the server's,
        and a body of another length is dropped, not handed on."""
        core = LobbyCore(appid="a", place=place)
        core.opened()
        _, trouble = core.message({"type": "error", "error": "crowded"})
        assert trouble is not None
        self.assertEqual(trouble.cause, "squatted")
        before = (core.mailbox, place(core.round)[1])
        core.squatted()
        self.assertNotEqual((core.mailbox, place(core.round)[1]), before)
        core.opened()
        self.assertEqual(core.message(message("ab" * 5_000_000)), (None, None))
        for n in range(MAX_MESSAGES - 1):
            self.assertIsNone(core.message(message(body(n)))[1])
        _, trouble = core.message(message(body(0)))
        assert trouble is not None
        self.assertIn(f"over {MAX_MESSAGES} messages", trouble.text)
        _, refused = core.message({"type": "welcome", "welcome": {"error": "down"}})
        assert refused is not None
        self.assertEqual(refused.cause, "refused")
