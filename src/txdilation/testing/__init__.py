"""Test helpers for txdilation's internal contracts, shipped so that every suite can share them.

The fakes live in :mod:`txdilation.testing.fakes` (each checked against its interface with
``zope.interface.verify.verifyObject``). :func:`missing_transitions` (:mod:`.transitions`)
checks that an Automat ``TypeMachine`` defines a transition for every (state, input) pair.
"""

from __future__ import annotations

from txdilation.testing.transitions import missing_transitions

__all__ = ["missing_transitions"]
