"""The meeting handshake (Noise KKpsk2 between the static identities): both sides reach the
same place; a file of one side answers or offers only as that side; the generation's psk, the
prologue and a receipt proof are all needed; an offer is answered once."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from txdilation.pairing.handshake import HandshakeFailed, Initiator, prologue, respond
from txdilation.pairing.identity_keys import new_private, public_of

PSK, RECEIPT = os.urandom(32), os.urandom(32)
BOUND = prologue("0" * 16, (b"a" * 16, b"b" * 16), ("1" * 16, "2" * 16), 1)


class HandshakeTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.a, self.b = new_private(), new_private()
        self.pa, self.pb = public_of(self.a), public_of(self.b)

    def test_both_reach_the_same_place(self) -> None:
        """The initiator's place (from the answer) is the responder's; a new offer gives a new
        place (fresh ephemerals and meeting key)."""
        offer = Initiator(self.a, self.pb, PSK, BOUND, [RECEIPT])
        reply, place = respond(self.b, self.pa, PSK, BOUND, offer.message, [RECEIPT], [RECEIPT])
        self.assertEqual(offer.finish(reply, [RECEIPT]), place)
        again = Initiator(self.a, self.pb, PSK, BOUND, [RECEIPT])
        self.assertNotEqual(
            respond(self.b, self.pa, PSK, BOUND, again.message, [RECEIPT], [RECEIPT])[1], place
        )
        self.assertNotIn(place.password, repr(place))

    def test_a_stolen_file_speaks_only_for_its_owner(self) -> None:
        """Someone with B's file (B's private key, A's public key, the psk, the receipts) can
        answer A as B, but cannot offer to B as A: without A's private key its offer, made
        with any other static key, does not authenticate."""
        offer = Initiator(self.a, self.pb, PSK, BOUND, [RECEIPT])
        reply, place = respond(self.b, self.pa, PSK, BOUND, offer.message, [RECEIPT], [RECEIPT])
        self.assertEqual(offer.finish(reply, [RECEIPT]), place)  # the owner's own credential
        forged = Initiator(new_private(), self.pb, PSK, BOUND, [RECEIPT])
        with self.assertRaises(HandshakeFailed):
            respond(self.b, self.pa, PSK, BOUND, forged.message, [RECEIPT], [RECEIPT])

    def test_psk_prologue_and_receipt_needed(self) -> None:
        """Another generation's psk, another prologue (other nonces or offer), or no proof of
        an acceptable receipt: refused, with what failed."""
        other = prologue("0" * 16, (b"a" * 16, b"b" * 16), ("1" * 16, "3" * 16), 1)
        offer = Initiator(self.a, self.pb, PSK, BOUND, [RECEIPT])
        with self.assertRaises(HandshakeFailed):
            respond(self.b, self.pa, PSK, other, offer.message, [RECEIPT], [RECEIPT])
        with self.assertRaises(HandshakeFailed) as caught:
            respond(self.b, self.pa, PSK, BOUND, offer.message, [RECEIPT], [os.urandom(32)])
        self.assertIn("receipt", str(caught.exception))
        reply, _ = respond(
            self.b, self.pa, os.urandom(32), BOUND, offer.message, [RECEIPT], [RECEIPT]
        )
        with self.assertRaises(HandshakeFailed):
            offer.finish(reply, [RECEIPT])

    def test_an_offer_is_answered_once(self) -> None:
        """A second answer to the same offer (a copy answering too) is refused."""
        offer = Initiator(self.a, self.pb, PSK, BOUND, [RECEIPT])
        reply, _ = respond(self.b, self.pa, PSK, BOUND, offer.message, [RECEIPT], [RECEIPT])
        second, _ = respond(self.b, self.pa, PSK, BOUND, offer.message, [RECEIPT], [RECEIPT])
        offer.finish(reply, [RECEIPT])
        with self.assertRaises(HandshakeFailed):
            offer.finish(second, [RECEIPT])
