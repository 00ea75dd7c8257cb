"""
The differential semantics suite: what an application sees with txdilation is what it sees
with stock magic-wormhole, except for the deviations listed here.

Every scenario of ``tests.support.semantics_scenarios`` (public API only; two peer processes
through the real mailbox server) runs twice at once: stock/stock and txdilation/txdilation.
Each side's trace of application-visible events (``tests.support.semantics``) must equal
stock's once the :data:`DEVIATIONS` are applied to stock's trace; every deviation is a fix of
a stock defect that cannot break an application written for stock, and is listed in
``docs/stock-defects.md`` under its id. txdilation must also never make Twisted log an error.

``TwistedSemanticsTests`` runs the scenarios the opt-in :data:`txdilation.TWISTED` semantics
change, and checks that exactly the :data:`TWISTED_DEVIATIONS` appear on top.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.trial.unittest import TestCase

from tests.support.harness import RealServersMixin
from tests.support.semantics_runner import Traces, run_scenario
from tests.support.semantics_scenarios import SCENARIOS

Event = list[Any]


@dataclass(frozen=True)
class Deviation:
    """In ``scenario``, side ``side``: stock shows the contiguous events ``stock``, txdilation
    shows ``ours`` instead. ``id`` is its row in docs/stock-defects.md."""

    id: str
    scenario: str
    side: str
    stock: tuple[Any, ...]
    ours: tuple[Any, ...]


def _d(
    id: str, scenario: str, side: str, stock: Sequence[Event], ours: Sequence[Event]
) -> Deviation:
    return Deviation(id, scenario, side, tuple(stock), tuple(ours))


_CLOSE_OK = ["result", "close", "str"]

#: Fixes of stock defects that no application written for stock can be hurt by (always on).
DEVIATIONS: tuple[Deviation, ...] = (
    # S1: subchannel transports have `disconnecting` (Twisted's LineReceiver reads it)
    _d("S1", "close-by-opener", "a", [["disconnecting", None]], [["disconnecting", True]]),
    # S2: connect()/listen() after w.close() errback WormholeClosedError
    _d(
        "S2",
        "connect-after-close",
        "a",
        [
            ["buildProtocol", "x#1", ["SubchannelAddress", "x", True]],
            ["connectionMade", "x#1"],
            ["fired", "connect", "RecordingProtocol"],
            ["fired", "listen", "SubchannelListeningPort"],
        ],
        [
            ["fired", "connect", "Failure(WormholeClosedError)"],
            ["fired", "listen", "Failure(WormholeClosedError)"],
        ],
    ),
    # S3 (stock defect 1): expected_subprotocols is honoured: other names answered with CLOSE
    _d(
        "S3",
        "expected-subprotocols",
        "a",
        [["fired", "other connectionLost", "no"]],
        [
            ["connectionLost", "other#1", "ConnectionDone()"],
            ["fired", "other connectionLost", "None"],
        ],
    ),
    # S4: a factory returning None on connect() fails with NoProtocol before any OPEN is sent
    _d(
        "S4",
        "factory-returns-none-connect",
        "a",
        [["result", "connect('none')", "Failure(AttributeError)"]],
        [["result", "connect('none')", "Failure(NoProtocol)"]],
    ),
    _d(
        "S4",
        "factory-returns-none-connect",
        "b",
        [
            ["buildProtocol", "none#1", ["SubchannelAddress", "none", True]],
            ["connectionMade", "none#1"],
            ["subchannels built", 1],
        ],
        [["subchannels built", 0]],
    ),
    # S5: a factory returning None for an incoming OPEN: the OPEN is answered with CLOSE
    _d(
        "S5",
        "factory-returns-none-listen",
        "a",
        [["fired", "connectionLost", "no"]],
        [["connectionLost", "refused#1", "ConnectionDone()"], ["fired", "connectionLost", "None"]],
    ),
    _d(
        "S5",
        "factory-returns-none-listen",
        "b",
        [["errors", ["AttributeError"]]],
        [["errors", []]],
    ),
    # S6 (stock defect 2): pausing a subchannel's reading works
    _d(
        "S6",
        "pause-reading",
        "b",
        [["call", "pauseProducing", "AttributeError"]],
        [
            ["call", "pauseProducing", "ok"],
            ["received while paused", 0],
            ["call", "resumeProducing", "ok"],
        ],
    ),
    _d(
        "S6",
        "pause-reading",
        "b",
        [["received while paused", 15], ["call", "resumeProducing", "AttributeError"]],
        [],
    ),
    # S7 (stock defect 4): an int ping_interval is accepted
    *(
        _d(
            "S7",
            "ping-interval-int",
            side,
            [["call", "dilate", "TypeError"], ["result", "close", "Failure(LonelyError)"]],
            [["call", "dilate", "ok"], ["result", "when_dilated", "None"], _CLOSE_OK],
        )
        for side in "ab"
    ),
    # S8: an exception raised by a subchannel protocol closes that subchannel only
    # (connectionLost with the exception, CLOSE to the peer); stock lets it break the link
    _d(
        "S8",
        "protocol-raises",
        "a",
        [["fired", "connectionLost", "no"]],
        [["connectionLost", "chat#1", "ConnectionDone()"], ["fired", "connectionLost", "None"]],
    ),
    _d(
        "S8",
        "protocol-raises",
        "b",
        [["dataReceived", "chat#1", "boom"]],
        [["dataReceived", "chat#1", "boom"], ["connectionLost", "chat#1", "RuntimeError()"]],
    ),
    _d("S8", "protocol-raises", "b", [["errors", ["RuntimeError"]]], [["errors", []]]),
    _d(
        "S8",
        "protocol-raises-in-connectionMade",
        "a",
        [["fired", "connectionLost", "no"]],
        [["connectionLost", "chat#1", "ConnectionDone()"], ["fired", "connectionLost", "None"]],
    ),
    _d(
        "S8",
        "protocol-raises-in-connectionMade",
        "b",
        [["dataReceived", "chat#1", "hello"], ["fired", "connectionLost", "no"], ["received", 5]],
        [
            ["connectionLost", "chat#1", "RuntimeError()"],
            ["fired", "connectionLost", "None"],
            ["received", 0],
        ],
    ),
    _d(
        "S8",
        "protocol-raises-in-connectionMade",
        "b",
        [["errors", ["RuntimeError"]]],
        [["errors", []]],
    ),
    # S9: unregisterProducer() without a registered producer is a no-op (stock: KeyError)
    _d(
        "S9",
        "push-producer",
        "a",
        [["call", "unregisterProducer after close", "KeyError"]],
        [["call", "unregisterProducer after close", "ok"]],
    ),
    _d(
        "S9",
        "register-producer-twice",
        "a",
        [["call", "unregisterProducer again", "KeyError"]],
        [["call", "unregisterProducer again", "ok"]],
    ),
    # S10: an on_status_update callback that raises is logged (stock: dilation never happens)
    _d(
        "S10",
        "status-callback-raises",
        "a",
        [
            ["timeout", "when_dilated"],
            ["call", "connector_for('chat')", "ok"],
            ["timeout", "connect('chat')"],
            ["result", "close", "Failure(RuntimeError)"],
            ["errors", ["RuntimeError", "RuntimeError", "RuntimeError", "RuntimeError"]],
        ],
        [
            ["result", "when_dilated", "None"],
            ["call", "connector_for('chat')", "ok"],
            ["buildProtocol", "chat#1", ["SubchannelAddress", "chat", True]],
            ["connectionMade", "chat#1"],
            ["result", "connect('chat')", "RecordingProtocol"],
            ["call", "write", "ok"],
            ["dataReceived", "chat#1", "pong"],
            ["call", "loseConnection", "ok"],
            ["connectionLost", "chat#1", "ConnectionDone()"],
            _CLOSE_OK,
            ["errors", []],
        ],
    ),
    _d(
        "S10",
        "status-callback-raises",
        "b",
        [
            ["timeout", "when_dilated"],
            ["call", "listener_for('chat')", "ok"],
            ["timeout", "listen('chat')"],
            ["timeout", "first subchannel"],
            ["result", "close", "Failure(LonelyError)"],
        ],
        [
            ["result", "when_dilated", "None"],
            ["call", "listener_for('chat')", "ok"],
            ["result", "listen('chat')", "SubchannelListeningPort"],
            ["buildProtocol", "chat#1", ["SubchannelAddress", "chat", True]],
            ["connectionMade", "chat#1"],
            ["dataReceived", "chat#1", "ping"],
            ["call", "write", "ok"],
            ["connectionLost", "chat#1", "ConnectionDone()"],
            _CLOSE_OK,
        ],
    ),
    # S11: write() after the subchannel closed raises AlreadyClosedError (stock: NoTransition)
    *(
        _d(
            "S11",
            "write-after-close",
            side,
            [["call", "write after close", "NoTransition"]],
            [["call", "write after close", "AlreadyClosedError"]],
        )
        for side in "ab"
    ),
    # S12: write() of a str raises TypeError (stock: AssertionError, gone under python -O)
    _d(
        "S12",
        "write-non-bytes",
        "a",
        [["call", "write(str)", "AssertionError"]],
        [["call", "write(str)", "TypeError"]],
    ),
)


def apply_deviations(
    scenario: str, side: str, stock: list[Event], deviations: Sequence[Deviation]
) -> list[Event]:
    """Stock's trace with each of ``deviations`` for (scenario, side) substituted, in order.

    :raises AssertionError: when a deviation's stock events are not in stock's trace (a listed
        deviation that stock no longer shows is itself a failure).
    """
    trace = [json.loads(json.dumps(e)) for e in stock]
    for deviation in deviations:
        if deviation.scenario != scenario or deviation.side != side:
            continue
        old = json.loads(json.dumps(list(deviation.stock)))
        new = json.loads(json.dumps(list(deviation.ours)))
        for start in range(len(trace) - len(old) + 1):
            if trace[start : start + len(old)] == old:
                trace[start : start + len(old)] = new
                break
        else:
            raise AssertionError(
                f"deviation {deviation.id} of {scenario}/{side} expects stock to show "
                f"{old}, but stock's trace is {trace}"
            )
    return trace


def describe(trace: list[Event]) -> str:
    return "\n".join("    " + json.dumps(e) for e in trace)


class _DifferentialBase(RealServersMixin, TestCase):
    timeout = 180

    async def both(self, scenario: str, semantics: str | None) -> tuple[Traces, Traces]:
        """Run ``scenario`` as stock/stock and txdilation/txdilation at the same time."""
        runs = [
            Deferred.fromCoroutine(
                run_scenario(
                    self.reactor,
                    self.mailbox.url,
                    scenario,
                    impl_a=impl,
                    impl_b=impl,
                    semantics=semantics,
                )
            )
            for impl in ("stock", "txdilation")
        ]
        (_, stock), (_, ours) = await DeferredList(runs, fireOnOneErrback=True, consumeErrors=True)
        return stock, ours

    def compare(
        self, scenario: str, stock: Traces, ours: Traces, deviations: Sequence[Deviation]
    ) -> None:
        for side in ("a", "b"):
            expected = apply_deviations(scenario, side, getattr(stock, side), deviations)
            actual = getattr(ours, side)
            self.assertEqual(
                actual,
                expected,
                f"{scenario}, side {side}: txdilation's trace\n{describe(actual)}\n"
                f"differs from stock's (with the listed deviations)\n{describe(expected)}",
            )
            self.assertEqual(actual[-1], ["errors", []], "txdilation made Twisted log an error")


class DifferentialSemanticsTests(_DifferentialBase):
    """Each scenario: txdilation (stock semantics, the drop-in's default) against stock."""


def _add_scenario_tests() -> None:
    for name, scenario in SCENARIOS.items():

        async def test(self: DifferentialSemanticsTests, name: str = name) -> None:
            stock, ours = await self.both(name, None)
            self.compare(name, stock, ours, DEVIATIONS)

        test.__name__ = "test_" + name.replace("-", "_")
        test.__doc__ = f"{name}: {scenario.doc}"
        setattr(DifferentialSemanticsTests, test.__name__, test)


_add_scenario_tests()


class DeviationListTests(TestCase):
    """The deviation list itself."""

    def test_every_deviation_names_a_scenario(self) -> None:
        """Each listed deviation belongs to an existing scenario, and there are at least 30
        scenarios."""
        self.assertGreaterEqual(len(SCENARIOS), 30)
        for deviation in DEVIATIONS:
            self.assertIn(deviation.scenario, SCENARIOS)
            self.assertIn(deviation.side, ("a", "b"))


# ---------------------------------------------------------------------------------------------
# the opt-in TWISTED semantics

#: the scenarios TwistedSemanticsTests runs (those whose traces the TWISTED switches change)
TWISTED_SCENARIOS = (
    "echo",
    "empty-write",
    "close-twice",
    "half-close",
    "half-close-misuse",
    "reentrant-half-close",
    "stop-producing",
    "push-producer",
    "register-producer-after-close",
    "listening-port",
    "close-wormhole-with-subchannels",
    "close-wormhole-before-dilation",
)

_LOST_FAILURE = ["connectionLost", "chat#1", "Failure(ConnectionDone)"]

#: On top of DEVIATIONS, what TWISTED shows (after :func:`twisted_view`, which already turns
#: every connectionLost reason into a Failure and sets the factory start/stop calls aside).
TWISTED_DEVIATIONS: tuple[Deviation, ...] = (
    # T1 empty_write_sends_nothing
    _d(
        "T1",
        "empty-write",
        "b",
        [["connectionMade", "chat#1"], ["dataReceived", "chat#1", ""]],
        [["connectionMade", "chat#1"]],
    ),
    # T2 idempotent_close
    _d(
        "T2",
        "close-twice",
        "a",
        [["call", "loseConnection again", "AlreadyClosedError"]],
        [["call", "loseConnection again", "ok"]],
    ),
    _d(
        "T2",
        "half-close-misuse",
        "a",
        [["call", "loseWriteConnection again", "AlreadyClosedError"]],
        [["call", "loseWriteConnection again", "ok"]],
    ),
    # T3 half_close_ends_with_connection_lost (with T2 for the close after both)
    _d(
        "T3",
        "half-close",
        "a",
        [["readConnectionLost", "chat#1"], ["fired", "connectionLost", "no"]],
        [["readConnectionLost", "chat#1"], _LOST_FAILURE, ["fired", "connectionLost", "None"]],
    ),
    _d(
        "T3",
        "half-close",
        "b",
        [["writeConnectionLost", "chat#1"]],
        [["writeConnectionLost", "chat#1"], _LOST_FAILURE],
    ),
    _d(
        "T3",
        "half-close",
        "b",
        [["fired", "connectionLost", "no"]],
        [["fired", "connectionLost", "None"]],
    ),
    _d(
        "T3",
        "half-close-misuse",
        "a",
        [
            ["readConnectionLost", "chat#1"],
            ["call", "loseConnection after both", "NormalCloseUsedOnHalfCloseable"],
        ],
        [
            ["readConnectionLost", "chat#1"],
            _LOST_FAILURE,
            ["call", "loseConnection after both", "ok"],
        ],
    ),
    _d(
        "T3",
        "half-close-misuse",
        "a",
        [["fired", "connectionLost", "no"]],
        [["fired", "connectionLost", "None"]],
    ),
    *(
        _d(
            "T3",
            "reentrant-half-close",
            side,
            [[event, "chat#1"], ["fired", "connectionLost", "no"]],
            [[event, "chat#1"], _LOST_FAILURE, ["fired", "connectionLost", "None"]],
        )
        for side, event in (("a", "readConnectionLost"), ("b", "writeConnectionLost"))
    ),
    # T4 stop_producing_closes: b's stopProducing closes the subchannel at once
    _d(
        "T4",
        "stop-producing",
        "a",
        [["call", "write", "ok"]],
        [_LOST_FAILURE, ["call", "write", "AlreadyClosedError"]],
    ),
    _d(
        "T4",
        "stop-producing",
        "a",
        [["call", "loseConnection", "ok"], _LOST_FAILURE],
        [["call", "loseConnection", "ok"]],
    ),
    _d(
        "T4",
        "stop-producing",
        "b",
        [["call", "stopProducing", "ok"], ["dataReceived", "chat#1", "after"], _LOST_FAILURE],
        [["call", "stopProducing", "ok"], _LOST_FAILURE],
    ),
    # T5 producer_stopped_on_close
    _d(
        "T5",
        "push-producer",
        "a",
        [["call", "registerProducer", "ok"], _LOST_FAILURE],
        [["call", "registerProducer", "ok"], ["producer.stopProducing", "push"], _LOST_FAILURE],
    ),
    _d(
        "T5",
        "register-producer-after-close",
        "a",
        [["call", "loseConnection", "ok"], _LOST_FAILURE],
        [["call", "loseConnection", "ok"], _LOST_FAILURE, ["producer.stopProducing", "late"]],
    ),
    # T6 stop_listening_stops: the OPEN after stopListening is held until the wormhole closes
    _d(
        "T6",
        "listening-port",
        "a",
        [
            ["call", "port.stopListening", "ok"],
            ["buildProtocol", "x#1", ["SubchannelAddress", "x", True]],
            ["connectionMade", "x#1"],
            ["dataReceived", "x#1", "anyone?"],
            ["built after stopListening", 1],
        ],
        [["call", "port.stopListening", "ok"], ["built after stopListening", 0]],
    ),
    # T7 close_delivers_connection_lost (T7 also: the held subchannel of T6 at b's close)
    _d(
        "T7",
        "listening-port",
        "b",
        [["call", "write", "ok"]],
        [["call", "write", "ok"], ["connectionLost", "x#1", "Failure(ConnectionDone)"]],
    ),
    _d(
        "T7",
        "close-wormhole-with-subchannels",
        "a",
        [["generation-never-decreases", True]],
        [["generation-never-decreases", True], _LOST_FAILURE],
    ),
    *(
        _d(
            "T7",
            "close-wormhole-with-subchannels",
            side,
            [["fired", "connectionLost", "no"]],
            [["fired", "connectionLost", "None"]],
        )
        for side in "ab"
    ),
    _d(
        "T7",
        "close-wormhole-with-subchannels",
        "b",
        [["generation-never-decreases", True]],
        [["generation-never-decreases", True], _LOST_FAILURE],
    ),
    # T8 close_fails_waiters
    _d(
        "T8",
        "close-wormhole-before-dilation",
        "a",
        [["fired", "when_dilated", "no"], ["fired", "connect", "no"], ["fired", "listen", "no"]],
        [
            ["fired", "when_dilated", "Failure(WormholeClosedError)"],
            ["fired", "connect", "Failure(WormholeClosedError)"],
            ["fired", "listen", "Failure(WormholeClosedError)"],
        ],
    ),
)


def twisted_view(trace: list[Event]) -> tuple[list[Event], dict[str, list[str]]]:
    """A trace as TWISTED's reason_is_failure shows it (every ``connectionLost`` reason a
    Failure), without the factory ``startFactory``/``stopFactory`` events, which are returned
    apart: factory name -> its start/stop calls in order (factory_start_stop)."""
    view: list[Event] = []
    factories: dict[str, list[str]] = {}
    for event in trace:
        if event[0] in ("startFactory", "stopFactory"):
            factories.setdefault(event[1], []).append(event[0])
            continue
        if event[0] == "connectionLost" and not event[2].startswith("Failure("):
            event = [event[0], event[1], f"Failure({event[2].removesuffix('()')})"]
        view.append(event)
    return view, factories


class TwistedSemanticsTests(_DifferentialBase):
    """The opt-in TWISTED semantics (``txdilation.install(semantics="twisted")``): the
    differences from stock are exactly DEVIATIONS, every connectionLost reason a Failure,
    listening factories started and stopped once each, and TWISTED_DEVIATIONS."""


def _add_twisted_tests() -> None:
    for name in TWISTED_SCENARIOS:

        async def test(self: TwistedSemanticsTests, name: str = name) -> None:
            stock, ours = await self.both(name, "twisted")
            for side in ("a", "b"):
                expected = apply_deviations(name, side, getattr(stock, side), DEVIATIONS)
                expected, none = twisted_view(expected)
                self.assertEqual(none, {}, "stock started or stopped a factory")
                expected = apply_deviations(name, side, expected, TWISTED_DEVIATIONS)
                actual, factories = twisted_view(getattr(ours, side))
                self.assertEqual(
                    actual,
                    expected,
                    f"{name}, side {side}: txdilation's trace\n{describe(actual)}\ndiffers "
                    f"from stock's with the TWISTED deviations\n{describe(expected)}",
                )
                listened = {
                    e[1][len("listen('") : -2]
                    for e in actual
                    if e[0] == "result"
                    and e[1].startswith("listen(")
                    and e[2] != "Failure(ValueError)"
                }
                for factory in listened:
                    self.assertEqual(factories.get(factory), ["startFactory", "stopFactory"])
                self.assertEqual(actual[-1], ["errors", []])

        test.__name__ = "test_" + name.replace("-", "_")
        test.__doc__ = f"{name} with TWISTED semantics: {SCENARIOS[name].doc}"
        setattr(TwistedSemanticsTests, test.__name__, test)


_add_twisted_tests()
