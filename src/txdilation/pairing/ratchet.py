"""The ratchet: how a pairing record changes at each step (pure functions, no I/O).

Layer: pairing core. The secret moves forward at every successful meeting, in steps that never
leave the two sides without a generation in common, whichever crashes when: :func:`met` (G
current, the meeting's **receipt** kept), :func:`confirm` (the peer holds it too),
:func:`stage` (G+1 kept as ``pending``), :func:`commit` (the peer stored G+1: it becomes
current). A side meets only a peer that proves one of :func:`acceptable_receipts`
(:mod:`.handshake`), so a copy of an older file cannot pull it back. Why it holds:
docs/module-notes.md.

Invariants: a record always holds its current generation; ``pending`` is current + 1; no
function here invents a secret (each takes it as input).
"""

from __future__ import annotations

from txdilation.pairing.record import MAX_RECEIPTS, Generation, Identity, PairingRecord

__all__ = [
    "acceptable_receipts",
    "commit",
    "confirm",
    "met",
    "new_record",
    "stage",
    "start_incarnation",
]


def new_record(
    me: Identity,
    peer: Identity,
    *,
    key: bytes,
    peer_key: bytes,
    mailbox: str,
    appid: str,
    relay: tuple[str, ...],
    secret: bytes,
    receipt: bytes,
    counter: int,
    now: float,
) -> PairingRecord:
    """The record a side writes after the code meeting: generation 0, not yet confirmed."""
    return PairingRecord(
        me=me,
        peer=peer,
        mailbox=mailbox,
        appid=appid,
        relay=relay,
        current=Generation(0, secret),
        key=key,
        peer_key=peer_key,
        receipts=(receipt,),
        counter=counter,
        created=now,
    )


def start_incarnation(record: PairingRecord) -> PairingRecord:
    """A new process starts with the pairing: its incarnation counter is one more."""
    return record.with_(counter=record.counter + 1)


def met(record: PairingRecord, fingerprint: str, receipt: bytes, now: float) -> PairingRecord:
    """A meeting with the generation named ``fingerprint`` succeeded (step 1).

    :raises ValueError: when this record does not hold that generation.
    """
    generation = record.generation_with(fingerprint)
    if generation is None:
        raise ValueError("met with a generation this side does not hold")
    receipts = (receipt, *record.receipts)[:MAX_RECEIPTS]
    return record.with_(
        current=generation, pending=None, receipts=receipts, confirmed=False, met=now
    )


def confirm(record: PairingRecord) -> PairingRecord:
    """The peer holds this side's newest receipt (step 2; after the code meeting: it stored
    the pairing)."""
    return record.with_(confirmed=True)


def stage(record: PairingRecord, secret: bytes) -> PairingRecord:
    """Keep the next generation's ``secret`` next to the current one (step 3).

    :raises ValueError: before the peer confirmed the receipt (it might not hold it).
    """
    if not record.confirmed:
        raise ValueError("staging before the peer confirmed the meeting")
    return record.with_(pending=Generation(record.current.number + 1, secret))


def commit(record: PairingRecord, fingerprint: str) -> PairingRecord:
    """The peer stored the pending generation named ``fingerprint`` (step 4).

    :raises ValueError: when it is not this record's pending generation.
    """
    pending = record.pending
    if pending is None or pending.fingerprint != fingerprint:
        raise ValueError("the peer stored a generation this side has not staged")
    return record.with_(current=pending, pending=None)


def acceptable_receipts(record: PairingRecord) -> tuple[bytes, ...]:
    """The receipts a peer may prove to be met: the newest; and the one before while this side
    holds nothing pending and the peer never confirmed the newest (the peer crashed in the
    last meeting before keeping its receipt)."""
    receipts = record.receipts[:1]
    if record.pending is None and not record.confirmed:
        receipts = record.receipts[:MAX_RECEIPTS]
    return receipts
