"""Shared by the Automat machines of every layer: the explicit "ignored here" transitions.

Every machine of txdilation defines a transition for every (state, input) pair, so that nothing
the peer or a confused caller does can raise Automat's ``NoTransition`` into the reactor. Most
pairs that are not part of the protocol are harmless repeats or late arrivals; :func:`complete`
turns each pair a machine leaves undefined into a self-loop with one behaviour (doing nothing,
logging a reason, or dropping a connection), in one place instead of hand-written lists.

This module is also the one place that touches Automat's private API (the ``automat._typed``
state types, a builder's and a built machine's automaton): :data:`State`,
:func:`automaton_of` and :func:`input_names` wrap it for the package, its test helpers and the
state-diagram generator, so an Automat upgrade that moves it breaks one module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from automat import NoTransition, TypeMachine, TypeMachineBuilder
from automat._core import Automaton
from automat._typed import TypedDataState, TypedState

__all__ = [
    "State",
    "TypedDataState",
    "TypedState",
    "automaton_of",
    "complete",
    "inert",
    "input_names",
    "machine_input_names",
    "nothing",
]

State: TypeAlias = "TypedState[Any, Any] | TypedDataState[Any, Any, Any, Any]"
"""A state of a ``TypeMachineBuilder`` machine (with or without per-state data)."""


def input_names(inputs: type) -> list[str]:
    """The input names of an input protocol class, in definition order."""
    return [n for n in vars(inputs) if not n.startswith("_")]


def automaton_of(
    machine: TypeMachine[Any, Any] | TypeMachineBuilder[Any, Any],
) -> Automaton[Any, str, Any]:
    """The automaton of a built machine or of a builder: its states, initial state and
    transitions (``states()``, ``initialState``, ``allTransitions()``, ``outputForInput()``)."""
    if isinstance(machine, TypeMachineBuilder):
        return machine._automaton
    automaton: Automaton[Any, str, Any] = machine.__automat_automaton__
    return automaton


def machine_input_names(machine: TypeMachine[Any, Any]) -> list[str]:
    """The input names of a built machine (every method of its input protocol)."""
    return sorted(n for n in vars(machine.__automat_type__) if not n.startswith("__"))


def nothing(inputs: Any, core: Any, *args: object) -> None:
    """A behaviour that does nothing (the input is a documented no-op in that state)."""


def complete(
    builder: TypeMachineBuilder[Any, Any],
    states: Iterable[State],
    inputs: Iterable[Callable[..., object]] | None = None,
    otherwise: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda _input: nothing,
) -> None:
    """Give each pair of ``states`` x ``inputs`` that has no transition yet a self-loop.

    Call it once the machine's real transitions are defined, before ``builder.build()``.

    :param inputs: the inputs concerned; None: every input of the builder's protocol.
    :param otherwise: for an input, the behaviour its loops run, ``(inputs, core, *args)``
        (a data state's data comes first in ``args``); by default :func:`nothing`.
    """
    automaton = automaton_of(builder)
    protocol: Any = builder.inputProtocol
    if inputs is None:
        inputs = [getattr(protocol, n) for n in input_names(protocol)]
    inputs = list(inputs)
    for state in states:
        for event in inputs:
            try:
                automaton.outputForInput(state, event.__name__)
            except NoTransition:
                state.upon(event).loop()(otherwise(event))


class _Inert:
    """Every input a no-op (see :func:`inert`)."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name in self._names:
            return _ignore
        raise AttributeError(name)


def _ignore(*args: object, **kwargs: object) -> None:
    return None


def inert(inputs: type) -> Any:
    """An object with every input of the ``inputs`` protocol class, each a no-op: what a
    finished machine's owner can hold instead of the machine, so that the machine (and the
    core it references) is freed with no cycle left, while late inputs stay harmless."""
    return _Inert(frozenset(input_names(inputs)))
