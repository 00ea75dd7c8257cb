"""``txdilation pairing show|forget PATH``: a pairing for people (never a secret or a key).

Layer: pairing presentation (files through :mod:`.store`; text out). :func:`describe` turns a
record into the lines ``show`` prints; :func:`show` and :func:`forget` are the commands: each
returns the exit status and writes its lines (or ONE error line) to the given streams.

Both sides of a pairing in step show the same generation and fingerprint; a side one step
ahead shows the other's generation as ``pending`` or the next one (docs/pairing.md).
"""

from __future__ import annotations

import time
from typing import IO

from txdilation.pairing.identity_keys import key_fingerprint, public_of
from txdilation.pairing.pairing_errors import PairingFileError
from txdilation.pairing.record import PairingRecord
from txdilation.pairing.store import PairingStore
from txdilation.pairing.store import forget as forget_file

__all__ = ["describe", "forget", "show"]

EXIT_REFUSED = 1


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(timestamp))


def describe(record: PairingRecord) -> list[str]:
    """The lines ``show`` prints for ``record``."""
    lines = [
        f"this side:   {record.me.short()}, key {key_fingerprint(public_of(record.key))}",
        f"peer:        {record.peer.short()}, key {key_fingerprint(record.peer_key)}",
        f"mailbox:     {record.mailbox} (app id {record.appid})",
        f"relays:      {', '.join(record.relay) if record.relay else 'none'}",
        f"generation:  {record.current.number} (fingerprint {record.current.fingerprint})",
    ]
    if record.pending is not None:
        lines.append(
            f"pending:     {record.pending.number} (fingerprint {record.pending.fingerprint}; "
            "the peer has not confirmed it yet)"
        )
    lines += [
        "confirmed:   "
        + ("yes" if record.confirmed else "no (the peer never said it stored the pairing)"),
        f"paired:      {_when(record.created)}",
        f"last met:    {_when(record.met)}",
        f"starts:      {record.counter}",
    ]
    return lines


def show(path: str, out: IO[str], err: IO[str]) -> int:
    """``txdilation pairing show PATH``."""
    try:
        record = PairingStore(path).load()
    except PairingFileError as e:
        print(f"txdilation pairing show: {e}", file=err)
        return EXIT_REFUSED
    print(f"pairing file {path}", file=out)
    for line in describe(record):
        print(f"  {line}", file=out)
    return 0


def forget(path: str, out: IO[str], err: IO[str]) -> int:
    """``txdilation pairing forget PATH``."""
    try:
        record = forget_file(path)
    except PairingFileError as e:
        print(f"txdilation pairing forget: {e}", file=err)
        return EXIT_REFUSED
    peer = f" with {record.peer.short()}" if record is not None else ""
    print(
        f"forgot the pairing{peer}: {path} removed (forget it on the peer's side too; pairing "
        "again needs a new code: this side never pairs from the old one again)",
        file=out,
    )
    return 0
