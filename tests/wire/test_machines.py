"""Tests for txdilation.wire.machines: complete(), inert() and the accessors of Automat's
private API, on a small machine built here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from automat import NoTransition, TypeMachineBuilder
from twisted.trial.unittest import SynchronousTestCase

from txdilation.wire.machines import automaton_of, complete, inert, input_names, machine_input_names


class Inputs(Protocol):
    def go(self) -> None:
        "Move on."

    def poke(self, n: int) -> None:
        "Something that is a no-op in most states."


@dataclass
class Core:
    log: list[str] = field(default_factory=list)


def build(fill: bool) -> object:
    b = TypeMachineBuilder(Inputs, Core)
    idle, busy = b.state("idle"), b.state("busy")

    @idle.upon(Inputs.go).to(busy)
    def start(m: Inputs, c: Core) -> None:
        c.log.append("start")

    @busy.upon(Inputs.poke).loop()
    def poked(m: Inputs, c: Core, n: int) -> None:
        c.log.append(f"poked {n}")

    if fill:

        def otherwise(event: object) -> object:
            def loop(m: Inputs, c: Core, *args: object) -> None:
                c.log.append(f"ignored {event.__name__}{args}")  # type: ignore[attr-defined]

            return loop

        complete(b, [idle, busy], otherwise=otherwise)
    return b.build()


class CompleteTests(SynchronousTestCase):
    def test_fills_only_the_missing_pairs(self) -> None:
        """Each (state, input) without a transition becomes a loop running ``otherwise``'s
        behaviour for that input; the defined transitions are untouched."""
        machine = build(fill=True)
        core = Core()
        m = machine(core)  # type: ignore[operator]
        m.poke(1)  # idle: filled
        m.go()  # idle -> busy: defined
        m.poke(2)  # busy: defined
        m.go()  # busy: filled
        self.assertEqual(core.log, ["ignored poke(1,)", "start", "poked 2", "ignored go()"])

    def test_without_it_a_pair_raises(self) -> None:
        """The same machine without complete() raises NoTransition (what complete() is
        there to prevent)."""
        m = build(fill=False)(Core())  # type: ignore[operator]
        self.assertRaises(NoTransition, m.poke, 1)

    def test_default_is_a_no_op_for_every_input(self) -> None:
        """With no ``inputs`` and no ``otherwise``: every input of the protocol, a no-op."""
        b = TypeMachineBuilder(Inputs, Core)
        only = b.state("only")
        complete(b, [only])
        core = Core()
        m = b.build()(core)
        m.go()
        m.poke(3)
        self.assertEqual(core.log, [])


class AccessorTests(SynchronousTestCase):
    def test_input_names(self) -> None:
        """The inputs of a protocol class (definition order) and of a built machine."""
        self.assertEqual(input_names(Inputs), ["go", "poke"])
        self.assertEqual(machine_input_names(build(fill=True)), ["go", "poke"])  # type: ignore[arg-type]

    def test_automaton_of(self) -> None:
        """The automaton of a builder or a machine: its states and initial state."""
        machine = build(fill=True)
        automaton = automaton_of(machine)  # type: ignore[arg-type]
        self.assertEqual(sorted(s.name for s in automaton.states()), ["busy", "idle"])
        self.assertEqual(automaton.initialState.name, "idle")

    def test_inert(self) -> None:
        """inert(): every input a no-op returning None; anything else is an AttributeError."""
        stand_in = inert(Inputs)
        self.assertIsNone(stand_in.go())
        self.assertIsNone(stand_in.poke(1))
        self.assertRaises(AttributeError, getattr, stand_in, "stop")
