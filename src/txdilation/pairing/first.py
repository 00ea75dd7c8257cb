"""The code meeting's own part: the code checked, the first record made, the code spent.

Layer: pairing glue (the conductor calls it; files through :mod:`.spent` and the keeper). A code
this side already paired from is refused (unless ``pair_again``) before anything is sent; the
first record (generation 0) comes from the code wormhole's material and the peer's
introduction (its id, name and static public key, which travelled inside the SPAKE2-authenticated
wormhole); once it is written, the code is spent.

Invariant: the code itself is never written anywhere (:mod:`.spent` keeps a slow hash).
"""

from __future__ import annotations

from txdilation.pairing import derive, ratchet
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.meeting import Meeting
from txdilation.pairing.pairing_errors import PairingError
from txdilation.pairing.pairing_messages import Introduce
from txdilation.pairing.pairing_options import PairingOptions
from txdilation.pairing.record import Identity, PairingRecord
from txdilation.pairing.spent import is_spent, spend

__all__ = ["check_code", "first_record"]


def check_code(options: PairingOptions) -> None:
    """Refuse a code this side already paired from (unless ``options.pair_again``).

    :raises PairingError: in one line.
    """
    if options.code is None or options.pair_again or not is_spent(options.path, options.code):
        return
    raise PairingError(
        f"this side already paired from the code {options.code} at {options.path}: a code "
        "pairs once (get a new code, or give --pair-again to pair again with it on purpose)"
    )


def first_record(
    keeper: RecordKeeper,
    meeting: Meeting,
    me: Identity,
    key: bytes,
    intro: Introduce,
    options: PairingOptions,
    code: str | None,
) -> PairingRecord:
    """Write generation 0 from the dilated code meeting, then spend ``code``.

    :raises PairingError: the file cannot be written.
    """
    peer = Identity(intro.id, intro.name)
    material = meeting.derive(derive.MATERIAL_PURPOSE)
    record = keeper.pair(
        ratchet.new_record(
            me,
            peer,
            key=key,
            peer_key=intro.key,
            mailbox=options.mailbox,
            appid=options.appid,
            relay=options.relay,
            secret=derive.initial_secret(material, me.id, peer.id),
            receipt=meeting.derive(derive.RECEIPT_PURPOSE),
            counter=1,
            now=keeper.now(),
        )
    )
    if code is not None:
        spend(options.path, code)
    return record
