"""Spent codes: a wormhole code this side paired from is never used by it again.

Layer: pairing I/O (one small file next to the pairing file: ``PATH.spent``, mode 0600, through
:mod:`.store`'s checked opens). It holds a random salt and, for each code this side paired
from, scrypt(code, salt): never the code itself, and slow to guess from. ``pairing forget``
leaves it, so the settings' old code (or someone who learned it) cannot pair this side again;
``--pair-again`` makes a new pairing with a spent code on purpose.

Invariants: :func:`is_spent` never raises for a missing file (nothing spent); a damaged file is
a :class:`~txdilation.pairing.pairing_errors.PairingFileError` with one line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from txdilation.pairing.pairing_errors import PairingFileError
from txdilation.pairing.store import MAX_FILE_SIZE, fsync_directory, open_checked

__all__ = ["is_spent", "spend", "spent_path"]

_FORMAT: Final = "txdilation-pairing-spent"
_MAX_CODES: Final = 100


def spent_path(pairing: str | os.PathLike[str]) -> Path:
    """``PATH.spent`` for the pairing file ``PATH``."""
    path = Path(pairing)
    return path.with_name(path.name + ".spent")


def _digest(code: str, salt: bytes) -> str:
    return Scrypt(salt=salt, length=32, n=2**14, r=8, p=1).derive(code.encode("utf-8")).hex()


def _read(path: Path) -> tuple[bytes, list[str]]:
    if not os.path.lexists(path):
        return os.urandom(16), []
    fd = open_checked(path, os.O_RDONLY, f"spent codes file {path}")
    try:
        data = os.read(fd, MAX_FILE_SIZE)
    finally:
        os.close(fd)
    try:
        body = json.loads(data.decode("utf-8"))
        if body["format"] != _FORMAT:
            raise ValueError("format")
        salt = bytes.fromhex(body["salt"])
        codes = [str(c) for c in body["codes"]]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise PairingFileError(f"spent codes file {path} is damaged: remove it") from None
    return salt, codes


def is_spent(pairing: str | os.PathLike[str], code: str) -> bool:
    """Whether this side already paired from ``code`` at the pairing file ``pairing``."""
    salt, codes = _read(spent_path(pairing))
    return bool(codes) and _digest(code, salt) in codes


def spend(pairing: str | os.PathLike[str], code: str) -> None:
    """Remember that this side paired from ``code`` (atomically, durably, mode 0600)."""
    path = spent_path(pairing)
    salt, codes = _read(path)
    digest = _digest(code, salt)
    if digest in codes:
        return
    codes = [*codes, digest][-_MAX_CODES:]
    data = json.dumps({"format": _FORMAT, "salt": salt.hex(), "codes": codes}).encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if os.path.lexists(temporary):
            temporary.unlink()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        fsync_directory(path.parent)
    except OSError as e:
        raise PairingFileError(
            f"spent codes file {path}: cannot write it: {e.strerror or e}"
        ) from None
