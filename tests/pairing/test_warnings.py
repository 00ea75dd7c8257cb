"""What a paired process warns about: a plaintext mailbox once (not for wss:// or this host),
each impostor once, a rendezvous squatted with its real cause, an unreachable server once."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.lobby import LobbyTrouble
from txdilation.pairing.warnings import Warnings, on_path_visible


class WarningsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.warnings = Warnings(
            lambda kind, **fields: self.events.append((kind, fields)), lambda: "peer", "P"
        )

    def test_plaintext_mailbox_said_once(self) -> None:
        """A ws:// mailbox on another host: one warning saying what an on-path observer sees
        (and not contents or keys), however often asked; wss:// and loopback: none."""
        for url in (
            "wss://relay.magic-wormhole.io/v1",
            "ws://127.0.0.1:4000/v1",
            "ws://localhost/v1",
        ):
            self.assertFalse(on_path_visible(url))
        self.warnings.plaintext("ws://relay.example:4000/v1")
        self.warnings.plaintext("ws://relay.example:4000/v1")
        self.assertEqual(len(self.events), 1)
        kind, fields = self.events[0]
        self.assertEqual((kind, fields["cause"]), ("warning", "plaintext"))
        self.assertIn("anyone on the path sees", fields["message"])
        self.assertIn("never their contents", fields["message"])

    def test_impostors_once_each_and_rendezvous_causes(self) -> None:
        """Each impostor nonce is news once; a squatted rendezvous names someone else opening
        or filling it (not a leaked secret); an unreachable server is said once."""
        self.assertTrue(self.warnings.impostor("1" * 16, 3, True, "copy"))
        self.assertFalse(self.warnings.impostor("1" * 16, 3, True, "copy"))
        self.assertTrue(self.warnings.impostor("2" * 16, 4, False, "the peer says so"))
        self.warnings.lobby(LobbyTrouble("squatted", "the server said: crowded"), "ws://m")
        self.warnings.lobby(LobbyTrouble("unreachable", "refused"), "ws://m")
        self.warnings.lobby(LobbyTrouble("unreachable", "refused"), "ws://m")
        causes = [fields["cause"] for _, fields in self.events]
        self.assertEqual(causes, ["impostor", "impostor", "rendezvous", "mailbox"])
        squatted = self.events[2][1]
        self.assertIn("someone else opened", squatted["advice"])
        self.assertNotIn("secret", squatted["message"] + squatted["advice"].split(";")[0])
