"""The record keeper: each step of a pairing's life, applied to the record and saved at once.

Layer: pairing glue between the pure :mod:`.ratchet` and the :class:`~.store.PairingStore`. Every
method computes the new record, saves it (atomically, durably) and only then makes it the
current one, so what the conductor sends afterwards never runs ahead of the disk. The test aid
``fault`` kills the process right after the save of a named step (:data:`FAULTS`).

Invariants: :attr:`RecordKeeper.record` is always what the file holds (or None before the code
meeting wrote it); a method that raises leaves it unchanged; the file is locked before it is
first read, so no other process's record is ever written back.
"""

from __future__ import annotations

import os
import signal
from typing import Final

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from txdilation.pairing import ratchet
from txdilation.pairing.record import Generation, PairingRecord
from txdilation.pairing.store import PairingStore

__all__ = ["FAULTS", "RecordKeeper"]

FAULTS: Final = ("paired", "pending-stored", "committed")
"""Where a ``fault`` kills the process (a test aid): after writing the pairing, after staging the
next generation, after committing it."""

_log = Logger()


class RecordKeeper:
    """See the module docstring.

    :param store: the pairing file.
    :param clock: gives the timestamps of the record.
    :param fault: one of :data:`FAULTS`, or None.
    """

    def __init__(self, store: PairingStore, clock: IReactorTime, fault: str | None) -> None:
        self.store = store
        self._clock = clock
        self._fault = fault
        self.record: PairingRecord | None = None

    def _save(self, record: PairingRecord, step: str | None = None) -> PairingRecord:
        self.store.save(record)
        self.record = record
        if step is not None and step == self._fault:
            _log.warn("pairing fault {step}: killing this process", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
        return record

    def now(self) -> float:
        return float(self._clock.seconds())

    def begin(self) -> PairingRecord:
        """Take the file's lock, then load it and count this incarnation.

        :raises PairingFileError: the file refused, or in use by another process.
        """
        self.store.lock()
        try:
            record = self.store.load()
        except BaseException:
            self.store.unlock()
            raise
        return self._save(ratchet.start_incarnation(record))

    def pair(self, record: PairingRecord) -> PairingRecord:
        """The code meeting's pairing (generation 0)."""
        return self._save(record, "paired")

    def confirm(self) -> bool:
        """The peer holds this side's newest receipt (stored the pairing, or met); True when
        that is news."""
        if self.record is None or self.record.confirmed:
            return False
        self._save(ratchet.confirm(self.record))
        return True

    def met(self, fingerprint: str, receipt: bytes) -> bool:
        """A meeting with the generation ``fingerprint`` succeeded; True when what this side
        holds changed."""
        assert self.record is not None
        before = self.record.held()
        record = ratchet.met(self.record, fingerprint, receipt, self.now())
        return self._save(record).held() != before

    def stage(self, secret: bytes) -> Generation:
        """Keep the next generation's ``secret``; returns that generation."""
        assert self.record is not None
        pending = self._save(ratchet.stage(self.record, secret), "pending-stored").pending
        assert pending is not None
        return pending

    def commit(self, fingerprint: str) -> Generation:
        """The peer stored the pending generation too; returns the new current one."""
        assert self.record is not None
        return self._save(ratchet.commit(self.record, fingerprint), "committed").current
