"""Shared by the Automat machines of every layer: the explicit "ignored here" transitions.

Every machine of txdilation defines a transition for every (state, input) pair, so that nothing
the peer or a confused caller does can raise Automat's ``NoTransition`` into the reactor. Most
pairs that are not part of the protocol are harmless repeats or late arrivals; :func:`complete`
turns each pair a machine leaves undefined into a self-loop with one behaviour (doing nothing,
logging a reason, or dropping a connection), in one place instead of hand-written lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from automat import NoTransition, TypeMachineBuilder
from automat._typed import TypedDataState, TypedState

__all__ = ["complete", "inert", "nothing"]


def nothing(inputs: Any, core: Any, *args: object) -> None:
    """A behaviour that does nothing (the input is a documented no-op in that state)."""


def complete(
    builder: TypeMachineBuilder[Any, Any],
    states: Iterable[TypedState[Any, Any] | TypedDataState[Any, Any, Any, Any]],
    inputs: Iterable[Callable[..., None]],
    otherwise: Callable[[Callable[..., None]], Callable[..., None]] = lambda _input: nothing,
) -> None:
    """Give each pair of ``states`` x ``inputs`` that has no transition yet a self-loop.

    Call it once the machine's real transitions are defined, before ``builder.build()``.

    :param otherwise: for an input, the behaviour its loops run, ``(inputs, core, *args)``
        (a data state's data comes first in ``args``); by default :func:`nothing`.
    """
    automaton = builder._automaton
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
    return _Inert(frozenset(n for n in vars(inputs) if not n.startswith("_")))
