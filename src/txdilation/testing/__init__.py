"""Test helpers for txdilation's internal contracts, shipped so that every suite can share them.

The fakes live in :mod:`txdilation.testing.fakes` (each checked against its interface with
``zope.interface.verify.verifyObject``). :func:`missing_transitions` checks that an Automat
``TypeMachine`` defines a transition for every (state, input) pair.
"""

from __future__ import annotations

from typing import Any

from automat import NoTransition, TypeMachine

from txdilation.wire.machines import automaton_of, machine_input_names

__all__ = ["missing_transitions"]


def missing_transitions(machine: TypeMachine[Any, Any]) -> list[tuple[str, str]]:
    """Return the ``(state name, input name)`` pairs ``machine`` has no transition for.

    Inputs are every method of the machine's input protocol (not only those some transition
    uses), states every state of its automaton.
    """
    automaton = automaton_of(machine)
    inputs = machine_input_names(machine)
    missing = []
    for state in sorted(automaton.states(), key=lambda s: s.name):
        for name in inputs:
            try:
                automaton.outputForInput(state, name)
            except NoTransition:
                missing.append((state.name, name))
    return missing
