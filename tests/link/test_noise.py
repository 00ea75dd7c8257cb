"""Tests for txdilation.link.noise (NoiseSession) and the txdilation._stock._noise drop-in names."""

from __future__ import annotations

import itertools
import os
from typing import Any

import noise.connection
import noise.exceptions
from hypothesis import given, settings
from hypothesis import strategies as st
from noise.state import CipherState
from twisted.trial.unittest import SynchronousTestCase
from wormhole._dilation import _noise as stock_noise

from txdilation._stock import _noise
from txdilation.link.framer import max_frame_size_for_record
from txdilation.link.noise import (
    MAX_CIPHERTEXT_PIECE,
    MAX_PLAINTEXT_PIECE,
    NOISE_PROTOCOL_NAME,
    SCRATCH_LIMIT,
    VIEW_THRESHOLD,
    NoiseSession,
)
from txdilation.wire.dilation_errors import NoiseError
from txdilation.wire.roles import Role

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
SIZES = [0, 1, 65510, 65511, 65519, 65520, 2 * 65519, 2 * 65519 + 1, 5 * 2**20]


def pair(leader_key: bytes = KEY, follower_key: bytes = KEY) -> tuple[NoiseSession, NoiseSession]:
    """A Leader and a Follower session that completed the handshake with each other."""
    leader = NoiseSession(Role.LEADER, leader_key)
    follower = NoiseSession(Role.FOLLOWER, follower_key)
    message1 = leader.start()
    assert message1 is not None
    assert follower.start() is None
    message2 = follower.receive_handshake(message1)
    assert message2 is not None
    assert leader.receive_handshake(message2) is None
    return leader, follower


def plain(initiator: bool, key: bytes = KEY) -> Any:
    """A bare noiseprotocol connection configured as stock Dilation configures it."""
    connection = noise.connection.NoiseConnection.from_name(NOISE_PROTOCOL_NAME)
    connection.set_psks(key)
    if initiator:
        connection.set_as_initiator()
    else:
        connection.set_as_responder()
    connection.start_handshake()
    return connection


def plaintext_of(size: int) -> bytes:
    """A plaintext whose pieces differ, so misordered pieces would show."""
    return (bytes(range(256)) * (size // 256 + 1))[:size]


class HandshakeTests(SynchronousTestCase):
    def test_handshake(self) -> None:
        """Leader sends 48 bytes, Follower answers 48 bytes, then both are complete."""
        leader = NoiseSession(Role.LEADER, KEY)
        follower = NoiseSession(Role.FOLLOWER, KEY)
        self.assertFalse(leader.handshake_complete)
        self.assertIsNone(follower.start())
        message1 = leader.start()
        assert message1 is not None
        self.assertEqual(len(message1), 48)
        self.assertFalse(leader.handshake_complete)
        message2 = follower.receive_handshake(message1)
        assert message2 is not None
        self.assertEqual(len(message2), 48)
        self.assertTrue(follower.handshake_complete)
        self.assertIsNone(leader.receive_handshake(message2))
        self.assertTrue(leader.handshake_complete)

    def test_follower_without_start(self) -> None:
        """The Follower need not call start() before receiving message 1."""
        leader = NoiseSession(Role.LEADER, KEY)
        follower = NoiseSession(Role.FOLLOWER, KEY)
        message1 = leader.start()
        assert message1 is not None
        self.assertIsNotNone(follower.receive_handshake(message1))

    def test_ephemerals_differ(self) -> None:
        """Two handshakes with the same key use fresh ephemerals (different message 1)."""
        first = NoiseSession(Role.LEADER, KEY).start()
        second = NoiseSession(Role.LEADER, KEY).start()
        self.assertNotEqual(first, second)

    def test_wrong_key(self) -> None:
        """A Follower with another dilation key refuses message 1 with NoiseError."""
        leader = NoiseSession(Role.LEADER, KEY)
        follower = NoiseSession(Role.FOLLOWER, OTHER_KEY)
        message1 = leader.start()
        assert message1 is not None
        self.assertRaises(NoiseError, follower.receive_handshake, message1)
        self.assertFalse(follower.handshake_complete)

    def test_message2_of_another_handshake(self) -> None:
        """A Leader refuses a well-formed message 2 that answers someone else's message 1.

        (With NNpsk0 a Follower holding another key already fails on message 1, so this is
        how a Leader meets a wrong or replayed answer.)
        """
        leader = NoiseSession(Role.LEADER, KEY)
        leader.start()
        message1 = NoiseSession(Role.LEADER, KEY).start()
        assert message1 is not None
        message2 = NoiseSession(Role.FOLLOWER, KEY).receive_handshake(message1)
        assert message2 is not None
        self.assertRaises(NoiseError, leader.receive_handshake, message2)
        self.assertFalse(leader.handshake_complete)

    @settings(max_examples=50)
    @given(st.binary(min_size=48, max_size=48))
    def test_garbage_message1(self, garbage: bytes) -> None:
        """Any 48 random bytes as message 1 raise NoiseError (nothing else)."""
        follower = NoiseSession(Role.FOLLOWER, KEY)
        self.assertRaises(NoiseError, follower.receive_handshake, garbage)

    @settings(max_examples=50)
    @given(st.binary(min_size=48, max_size=48))
    def test_garbage_message2(self, garbage: bytes) -> None:
        """Any 48 random bytes as message 2 raise NoiseError (nothing else)."""
        leader = NoiseSession(Role.LEADER, KEY)
        leader.start()
        self.assertRaises(NoiseError, leader.receive_handshake, garbage)

    def test_low_order_point(self) -> None:
        """An all-zero ephemeral key in message 2 (which breaks X25519) raises NoiseError."""
        leader = NoiseSession(Role.LEADER, KEY)
        leader.start()
        self.assertRaises(NoiseError, leader.receive_handshake, bytes(48))

    def test_wrong_length(self) -> None:
        """A handshake message of 47 or 49 bytes raises NoiseError, also when otherwise valid."""
        for size in [0, 47, 49]:
            with self.subTest(size=size):
                leader = NoiseSession(Role.LEADER, KEY)
                message1 = leader.start()
                assert message1 is not None
                padded = (message1 + b"\x00")[:size]
                follower = NoiseSession(Role.FOLLOWER, KEY)
                self.assertRaises(NoiseError, follower.receive_handshake, padded)

    def test_payload_refused(self) -> None:
        """A valid handshake message that carries a payload is refused (payloads are empty)."""
        theirs = plain(initiator=True)
        message1 = bytes(theirs.write_message(b"hello"))
        self.assertEqual(len(message1), 48 + 5)
        follower = NoiseSession(Role.FOLLOWER, KEY)
        self.assertRaises(NoiseError, follower.receive_handshake, message1)

    def test_called_twice(self) -> None:
        """A second handshake message (or a second Leader start()) raises NoiseError."""
        leader, follower = pair()
        self.assertRaises(NoiseError, leader.receive_handshake, bytes(48))
        self.assertRaises(NoiseError, follower.receive_handshake, bytes(48))
        again = NoiseSession(Role.LEADER, KEY)
        again.start()
        self.assertRaises(NoiseError, again.start)

    def test_leader_before_start(self) -> None:
        """A Leader that has not sent message 1 cannot accept message 2."""
        leader = NoiseSession(Role.LEADER, KEY)
        self.assertRaises(NoiseError, leader.receive_handshake, bytes(48))

    def test_bad_key_size(self) -> None:
        """A dilation key that is not 32 bytes is a programming error (ValueError)."""
        self.assertRaises(ValueError, NoiseSession, Role.LEADER, b"short")


class TransportTests(SynchronousTestCase):
    def test_both_ways(self) -> None:
        """After the handshake each side decrypts what the other encrypts, in order."""
        leader, follower = pair()
        for i in range(3):
            self.assertEqual(follower.decrypt(leader.encrypt(b"L%d" % i)), b"L%d" % i)
            self.assertEqual(leader.decrypt(follower.encrypt(b"F%d" % i)), b"F%d" % i)

    def test_kcm_size(self) -> None:
        """The one-byte KCM plaintext becomes a 17-byte ciphertext."""
        leader, _ = pair()
        self.assertEqual(len(leader.encrypt(b"\x00")), 17)

    def test_sizes_both_ways(self) -> None:
        """Records around the 65519-byte piece size and of 5 MiB round-trip both ways.

        The payload has one 16-byte tag per 65519-byte piece: 65519 -> 65535,
        65520 -> 65535 + 17; in general max_frame_size_for_record(size).
        """
        leader, follower = pair()
        for size in SIZES:
            with self.subTest(size=size):
                message = plaintext_of(size)
                for sender, receiver in [(leader, follower), (follower, leader)]:
                    payload = sender.encrypt(message)
                    self.assertEqual(len(payload), max_frame_size_for_record(size))
                    self.assertEqual(receiver.decrypt(payload), message)

    def test_piece_boundaries(self) -> None:
        """65519 bytes fit in one 65535-byte message; 65520 need a second 17-byte one."""
        leader, _ = pair()
        self.assertEqual(len(leader.encrypt(plaintext_of(65519))), MAX_CIPHERTEXT_PIECE)
        self.assertEqual(len(leader.encrypt(plaintext_of(65520))), MAX_CIPHERTEXT_PIECE + 17)

    def test_tampered(self) -> None:
        """A flipped bit anywhere (first or a later piece) raises NoiseError."""
        for size, position in [(10, 3), (200_000, 5), (200_000, 70_000), (200_000, -1)]:
            with self.subTest(size=size, position=position):
                leader, follower = pair()
                payload = bytearray(leader.encrypt(plaintext_of(size)))
                payload[position] ^= 0x01
                self.assertRaises(NoiseError, follower.decrypt, bytes(payload))

    def test_truncated(self) -> None:
        """A ciphertext shorter than a tag, or missing its last piece, raises NoiseError."""
        leader, follower = pair()
        self.assertRaises(NoiseError, follower.decrypt, leader.encrypt(b"abc")[:10])
        leader, follower = pair()
        payload = leader.encrypt(plaintext_of(100_000))
        self.assertRaises(NoiseError, follower.decrypt, payload[: MAX_CIPHERTEXT_PIECE + 5])

    def test_replay(self) -> None:
        """Decrypting the same ciphertext twice fails: each piece uses the next nonce."""
        leader, follower = pair()
        payload = leader.encrypt(b"once")
        self.assertEqual(follower.decrypt(payload), b"once")
        self.assertRaises(NoiseError, follower.decrypt, payload)

    def test_dead_after_failure(self) -> None:
        """After a NoiseError the session refuses even valid ciphertext and encryption."""
        leader, follower = pair()
        good = leader.encrypt(b"good")
        self.assertRaises(NoiseError, follower.decrypt, b"\x00" * 20)
        self.assertRaises(NoiseError, follower.decrypt, good)
        self.assertRaises(NoiseError, follower.encrypt, b"x")

    def test_before_handshake(self) -> None:
        """encrypt and decrypt before the handshake completes raise NoiseError."""
        self.assertRaises(NoiseError, NoiseSession(Role.FOLLOWER, KEY).decrypt, bytes(17))
        self.assertRaises(NoiseError, NoiseSession(Role.LEADER, KEY).encrypt, b"x")
        leader = NoiseSession(Role.LEADER, KEY)
        leader.start()
        self.assertRaises(NoiseError, leader.decrypt, bytes(17))

    @settings(max_examples=25)
    @given(st.binary(max_size=200_000))
    def test_round_trip_any(self, message: bytes) -> None:
        """Any plaintext round-trips, with the payload size max_frame_size_for_record says."""
        leader, follower = pair()
        payload = leader.encrypt(message)
        self.assertEqual(len(payload), max_frame_size_for_record(len(message)))
        self.assertEqual(follower.decrypt(payload), message)


class PlainNoiseInteropTests(SynchronousTestCase):
    """Interop with a bare noiseprotocol connection, as stock Dilation drives it."""

    def check_transport(self, ours: NoiseSession, theirs: Any) -> None:
        big = plaintext_of(3 * MAX_PLAINTEXT_PIECE + 100)
        # Ours -> plain: the plain side decrypts the frame piece by piece.
        payload = ours.encrypt(big)
        pieces = [
            theirs.decrypt(payload[start : start + MAX_CIPHERTEXT_PIECE])
            for start in range(0, len(payload), MAX_CIPHERTEXT_PIECE)
        ]
        self.assertEqual(len(pieces), 4)
        self.assertEqual(b"".join(pieces), big)
        self.assertEqual(theirs.decrypt(ours.encrypt(b"small")), b"small")
        # Plain -> ours: stock concatenates piece ciphertexts into one frame.
        frame = b"".join(
            theirs.encrypt(big[start : start + MAX_PLAINTEXT_PIECE])
            for start in range(0, len(big), MAX_PLAINTEXT_PIECE)
        )
        self.assertEqual(ours.decrypt(frame), big)
        self.assertEqual(ours.decrypt(theirs.encrypt(b"\x00")), b"\x00")

    def test_we_lead(self) -> None:
        """Our Leader completes the handshake and exchanges data with a plain responder."""
        ours = NoiseSession(Role.LEADER, KEY)
        theirs = plain(initiator=False)
        message1 = ours.start()
        self.assertEqual(bytes(theirs.read_message(message1)), b"")
        self.assertIsNone(ours.receive_handshake(bytes(theirs.write_message())))
        self.assertTrue(theirs.handshake_finished)
        self.check_transport(ours, theirs)

    def test_we_follow(self) -> None:
        """Our Follower completes the handshake and exchanges data with a plain initiator."""
        ours = NoiseSession(Role.FOLLOWER, KEY)
        theirs = plain(initiator=True)
        message2 = ours.receive_handshake(bytes(theirs.write_message()))
        self.assertEqual(bytes(theirs.read_message(message2)), b"")
        self.assertTrue(theirs.handshake_finished)
        self.check_transport(ours, theirs)


def pieces_of(message: bytes) -> list[bytes]:
    """``message`` cut into Noise transport plaintexts (one empty piece for b"")."""
    cuts = range(0, len(message), MAX_PLAINTEXT_PIECE)
    return [message[start : start + MAX_PLAINTEXT_PIECE] for start in cuts] or [b""]


class NoiseprotocolDifferentialTests(SynchronousTestCase):
    """Our transport step (ChaCha20-Poly1305 from ``cryptography``, keys and nonces taken from
    the handshake) against noiseprotocol's own CipherState on the same keys and nonces."""

    def connected(self, we_lead: bool) -> tuple[NoiseSession, Any]:
        ours = NoiseSession(Role.LEADER if we_lead else Role.FOLLOWER, KEY)
        theirs = plain(initiator=not we_lead)
        if we_lead:
            theirs.read_message(ours.start())
            ours.receive_handshake(bytes(theirs.write_message()))
        else:
            theirs.read_message(ours.receive_handshake(bytes(theirs.write_message())))
        self.assertTrue(theirs.handshake_finished)
        return ours, theirs

    def reference_states(self, theirs: Any) -> tuple[CipherState, CipherState]:
        """Fresh noiseprotocol CipherStates: one with our sending key, one with theirs."""
        protocol = theirs.noise_protocol
        ours_sending = CipherState(protocol)
        ours_sending.initialize_key(protocol.cipher_state_decrypt.k)
        theirs_sending = CipherState(protocol)
        theirs_sending.initialize_key(protocol.cipher_state_encrypt.k)
        return ours_sending, theirs_sending

    def check(self, sizes: list[int]) -> None:
        """Each size in turn, both roles; received with decrypt, then again (a fresh pair)
        with decrypt_view, the payload given as a memoryview of a larger buffer."""
        for we_lead, view in itertools.product((True, False), (False, True)):
            ours, theirs = self.connected(we_lead)
            ours_sending, theirs_sending = self.reference_states(theirs)
            for size in sizes:
                message = plaintext_of(size)
                expected = b"".join(
                    ours_sending.encrypt_with_ad(None, p) for p in pieces_of(message)
                )
                self.assertEqual(ours.encrypt(message), expected, (we_lead, size))
                incoming = b"".join(
                    theirs_sending.encrypt_with_ad(None, p) for p in pieces_of(message)
                )
                if view:
                    framed = memoryview(b"\x00" * 4 + incoming + b"\xff")[4:-1]
                    self.assertEqual(bytes(ours.decrypt_view(framed)), message, (we_lead, size))
                else:
                    self.assertEqual(ours.decrypt(incoming), message)

    def test_same_ciphertexts(self) -> None:
        """For every size around the piece boundaries, in sequence (so the nonces advance by
        one per piece), our ciphertext equals noiseprotocol's byte for byte, both roles; and we
        decrypt what noiseprotocol encrypts, with decrypt and with decrypt_view (sizes above
        SCRATCH_LIMIT, then below it again, included)."""
        self.check([*SIZES, 3, 65519 * 3, 65519 * 3 + 7, 0, 9, SCRATCH_LIMIT + 1, 65545])

    @settings(max_examples=20)
    @given(st.lists(st.integers(0, 4 * MAX_PLAINTEXT_PIECE), max_size=6))
    def test_same_ciphertexts_any_sequence(self, sizes: list[int]) -> None:
        """Any sequence of message sizes gives noiseprotocol's ciphertexts exactly, and
        decrypt/decrypt_view give noiseprotocol's plaintexts."""
        self.check(sizes)

    def test_pieces_equal_whole(self) -> None:
        """encrypt_pieces(head, body) gives noiseprotocol's pieces of head + body, for heads
        and bodies of any length (a memoryview body too); decrypt_pieces gives the plaintext
        pieces of a frame payload (given as a memoryview)."""
        cases = [(b"", b""), (b"h" * 9, b""), (b"h" * 9, b"b" * 65510), (b"h" * 9, b"b" * 65511)]
        cases += [(b"h" * 9, memoryview(plaintext_of(200_000))), (b"H" * 70_000, b"tail")]
        ours, theirs = self.connected(we_lead=True)
        ours_sending, theirs_sending = self.reference_states(theirs)
        for head, body in cases:
            message = head + bytes(body)
            expected = [ours_sending.encrypt_with_ad(None, p) for p in pieces_of(message)]
            self.assertEqual(ours.encrypt_pieces(head, body), expected)
            incoming = b"".join(theirs_sending.encrypt_with_ad(None, p) for p in pieces_of(message))
            self.assertEqual(ours.decrypt_pieces(memoryview(incoming)), pieces_of(message))

    def test_decrypt_view_reuses_one_small_buffer(self) -> None:
        """decrypt_view decrypts a payload over VIEW_THRESHOLD bytes into one buffer the
        session keeps (grown as needed up to SCRATCH_LIMIT): the next such call overwrites the
        previous plaintext. A plaintext over SCRATCH_LIMIT gets a buffer of its own, and the
        kept buffer stays as it was; a small payload's plaintext is plain bytes."""
        leader, follower = pair()
        small = follower.decrypt_view(leader.encrypt(b"x" * 100))
        self.assertEqual((type(small), small), (bytes, b"x" * 100))
        self.assertIs(
            type(follower.decrypt_view(leader.encrypt(bytes(VIEW_THRESHOLD - 16)))), bytes
        )
        first = follower.decrypt_view(leader.encrypt(plaintext_of(65545)))
        self.assertIsInstance(first, memoryview)
        assert isinstance(first, memoryview)
        self.assertEqual(bytes(first), plaintext_of(65545))
        second = follower.decrypt_view(leader.encrypt(b"y" * VIEW_THRESHOLD))
        assert isinstance(second, memoryview)
        self.assertIs(second.obj, first.obj)
        self.assertEqual(bytes(first[:VIEW_THRESHOLD]), b"y" * VIEW_THRESHOLD)  # overwritten
        big = follower.decrypt_view(leader.encrypt(plaintext_of(SCRATCH_LIMIT + 1)))
        assert isinstance(big, memoryview)
        self.assertEqual(bytes(big), plaintext_of(SCRATCH_LIMIT + 1))
        self.assertIsNot(big.obj, first.obj)
        again = follower.decrypt_view(leader.encrypt(plaintext_of(SCRATCH_LIMIT)))
        assert isinstance(again, memoryview)
        self.assertEqual(bytes(again), plaintext_of(SCRATCH_LIMIT))
        self.assertIsNot(again.obj, first.obj)  # grown, up to the limit
        last = follower.decrypt_view(leader.encrypt(bytes(VIEW_THRESHOLD)))
        assert isinstance(last, memoryview)
        self.assertIs(last.obj, again.obj)

    def test_decrypt_view_failures(self) -> None:
        """decrypt_view raises NoiseError (and the session stays dead) for a flipped bit in
        the first or a later piece, a payload or last piece shorter than a tag, a replay,
        before the handshake, and at the nonce limit, for small and large payloads."""
        cases: list[tuple[str, Any]] = [
            ("empty", lambda p: b""),
            ("shorter than a tag", lambda p: p[:15]),
            ("last piece shorter than a tag", lambda p: p[: MAX_CIPHERTEXT_PIECE + 5]),
            ("first piece tampered", lambda p: bytes([p[0] ^ 1]) + p[1:]),
            ("later piece tampered", lambda p: p[:-1] + bytes([p[-1] ^ 1])),
            ("small tampered", lambda p: bytes([p[0] ^ 1]) + p[1:100]),
        ]
        for name, mangle in cases:
            with self.subTest(name):
                leader, follower = pair()
                payload = leader.encrypt(plaintext_of(100_000))
                self.assertRaises(NoiseError, follower.decrypt_view, mangle(payload))
                self.assertRaises(NoiseError, follower.decrypt_view, payload)
        for size in (4, 100_000):
            with self.subTest(replay=size):
                leader, follower = pair()
                payload = leader.encrypt(plaintext_of(size))
                self.assertEqual(bytes(follower.decrypt_view(payload)), plaintext_of(size))
                self.assertRaises(NoiseError, follower.decrypt_view, payload)
        for size in (17, 100_000):
            with self.subTest(before_handshake=size):
                fresh = NoiseSession(Role.FOLLOWER, KEY)
                self.assertRaises(NoiseError, fresh.decrypt_view, bytes(size))
        leader, follower = pair()
        leader._send_nonce = follower._recv_nonce = 2**64 - 3
        self.assertEqual(bytes(follower.decrypt_view(leader.encrypt(bytes(70_000)))), bytes(70_000))
        error = self.assertRaises(NoiseError, follower.decrypt_view, bytes(17))
        self.assertIn("nonces exhausted", str(error))
        leader, follower = pair()
        leader._send_nonce = follower._recv_nonce = 2**64 - 3
        follower.decrypt_view(leader.encrypt(b"1"))
        error = self.assertRaises(NoiseError, follower.decrypt_view, bytes(70_000))
        self.assertIn("nonces exhausted", str(error))

    def test_nonce_limit(self) -> None:
        """Like noiseprotocol, the nonce 2**64-1 is never used: a session that would need it
        fails with NoiseError (and stays dead) instead of encrypting or decrypting with it."""
        leader, follower = pair()
        leader._send_nonce = 2**64 - 2
        follower._recv_nonce = 2**64 - 2
        follower.decrypt(leader.encrypt(b"last"))
        self.assertRaises(NoiseError, leader.encrypt, b"one too many")
        self.assertRaises(NoiseError, follower.decrypt, bytes(17))
        self.assertRaises(NoiseError, leader.encrypt, b"dead")
        other, _ = pair()
        other._send_nonce = 2**64 - 3
        self.assertRaises(NoiseError, other.encrypt, bytes(3 * MAX_PLAINTEXT_PIECE))


class DropInNamesTests(SynchronousTestCase):
    def test_constants_match_stock(self) -> None:
        """_noise's size constants equal stock wormhole._dilation._noise's."""
        self.assertEqual(_noise.NOISE_MAX_PAYLOAD, stock_noise.NOISE_MAX_PAYLOAD)
        self.assertEqual(_noise.NOISE_MAX_CIPHERTEXT, stock_noise.NOISE_MAX_CIPHERTEXT)
        self.assertEqual(MAX_PLAINTEXT_PIECE, stock_noise.NOISE_MAX_PAYLOAD)

    def test_names_are_noiseprotocols(self) -> None:
        """_noise re-exports noiseprotocol's NoiseConnection and exceptions (truthy, usable)."""
        self.assertIs(_noise.NoiseConnection, noise.connection.NoiseConnection)
        self.assertIs(_noise.NoiseInvalidMessage, noise.exceptions.NoiseInvalidMessage)
        self.assertIs(_noise.NoiseHandshakeError, noise.exceptions.NoiseHandshakeError)
        self.assertTrue(_noise.NoiseConnection)

    def test_random_keys(self) -> None:
        """Sessions built from the same random key interoperate (no fixed-key artefact)."""
        key = os.urandom(32)
        leader, follower = pair(key, key)
        self.assertEqual(follower.decrypt(leader.encrypt(b"k")), b"k")
