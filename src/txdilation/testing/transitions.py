"""Test helpers: which (state, input) pairs an Automat ``TypeMachine`` has no transition for."""

from __future__ import annotations

from typing import Any

from automat import NoTransition, TypeMachine

from txdilation.wire.machines import automaton_of, machine_input_names


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
