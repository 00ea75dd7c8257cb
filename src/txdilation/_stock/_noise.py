"""Drop-in surface of stock ``wormhole._dilation._noise`` (crypto layer, names only).

Stock code and magic-wormhole's own tests import these names from ``wormhole._dilation._noise``;
``wormhole.create()`` only checks that ``NoiseConnection`` is truthy. txdilation itself uses
:class:`txdilation.link.noise.NoiseSession` instead.

Invariant: the two size constants equal :data:`~txdilation.link.noise.MAX_PLAINTEXT_PIECE` and
:data:`~txdilation.link.noise.MAX_CIPHERTEXT_PIECE`.
"""

from __future__ import annotations

from noise.connection import NoiseConnection
from noise.exceptions import NoiseHandshakeError, NoiseInvalidMessage

from txdilation.link.noise import MAX_CIPHERTEXT_PIECE, MAX_PLAINTEXT_PIECE

NOISE_MAX_PAYLOAD = MAX_PLAINTEXT_PIECE  # 65535 minus the 16-byte tag
NOISE_MAX_CIPHERTEXT = MAX_CIPHERTEXT_PIECE  # 65535

__all__ = [
    "NOISE_MAX_CIPHERTEXT",
    "NOISE_MAX_PAYLOAD",
    "NoiseConnection",
    "NoiseHandshakeError",
    "NoiseInvalidMessage",
]
