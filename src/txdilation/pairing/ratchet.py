"""The ratchet: how a pairing record changes at each step (pure functions, no I/O).

Layer: pairing core. The secret moves forward at every successful meeting, in steps that
never leave the two sides without a generation in common, whichever of them crashes when:

1. :func:`met`: a meeting made with generation G succeeded (both sides hold G): G becomes the
   current generation, anything else is dropped;
2. once the meeting is dilated, :func:`stage`: the next secret (from G and the meeting's own
   key material, :func:`~txdilation.pairing.derive.next_secret`) is kept as ``pending``, next
   to G, and written; then this side tells the peer it stored generation G+1;
3. :func:`commit`: once the peer said it stored G+1 too, G+1 becomes current and G is dropped.

A side holding G and G+1 meets on G+1 if the peer holds it and on G otherwise (the planner
picks the newest generation both hold), so:

- a crash before (2) on either side: both still hold G;
- a crash between (2) and (3): the crashed side holds G and G+1; the other holds G and G+1
  (it never heard the crashed side's word), or only G+1 (it did): they share G+1;
- a crash after (3): the other side holds G+1, with or without G.

An old copy of the file (holding only generations before G+1) stops working once both sides
committed G+1: no side meets on those generations any more.

Invariants: a record always holds its current generation; ``pending`` is current + 1; no
function here invents a secret (each takes it as input).
"""

from __future__ import annotations

from txdilation.pairing.record import Generation, Identity, PairingRecord

__all__ = ["commit", "confirm", "met", "new_record", "stage", "start_incarnation"]


def new_record(
    me: Identity,
    peer: Identity,
    *,
    mailbox: str,
    appid: str,
    relay: tuple[str, ...],
    secret: bytes,
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
        counter=counter,
        created=now,
    )


def start_incarnation(record: PairingRecord) -> PairingRecord:
    """A new process starts with the pairing: its incarnation counter is one more."""
    return record.with_(counter=record.counter + 1)


def met(record: PairingRecord, fingerprint: str, now: float) -> PairingRecord:
    """A meeting with the generation named ``fingerprint`` succeeded (step 1).

    :raises ValueError: when this record does not hold that generation.
    """
    generation = record.generation_with(fingerprint)
    if generation is None:
        raise ValueError("met with a generation this side does not hold")
    return record.with_(current=generation, pending=None, confirmed=True, met=now)


def stage(record: PairingRecord, secret: bytes) -> PairingRecord:
    """Keep the next generation's ``secret`` next to the current one (step 2)."""
    return record.with_(pending=Generation(record.current.number + 1, secret))


def commit(record: PairingRecord, fingerprint: str) -> PairingRecord:
    """The peer stored the pending generation named ``fingerprint`` (step 3).

    :raises ValueError: when it is not this record's pending generation.
    """
    pending = record.pending
    if pending is None or pending.fingerprint != fingerprint:
        raise ValueError("the peer stored a generation this side has not staged")
    return record.with_(current=pending, pending=None)


def confirm(record: PairingRecord) -> PairingRecord:
    """The peer said it stored the pairing made by the code meeting."""
    return record.with_(confirmed=True)
