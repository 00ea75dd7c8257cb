"""The exceptions' family tree (txdilation.errors): every exception the package defines derives
from TxdilationError through one family, keeps the bases callers already catch it by, and the
stock names the drop-in exposes are there; callers catch real errors by family."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from twisted.internet.error import ConnectError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase
from wormhole.errors import WormholeClosed

import txdilation
from txdilation.errors import (
    LinkFailure,
    PairingFailure,
    ProtocolViolation,
    TxdilationError,
    UsageMistake,
)

FAMILIES = (UsageMistake, ProtocolViolation, PairingFailure, LinkFailure)

#: modules not imported by the walk: the ``txdilation`` command runs on import, and the
#: drop-in's sitecustomize installs txdilation
NOT_IMPORTED = ("txdilation.__main__", "txdilation._dropin_site")

#: bases callers may catch these by today (and stock-compatible callers): each must stay
KEPT_BASES: dict[str, tuple[type[BaseException], ...]] = {
    "txdilation.values.BadValue": (ValueError,),
    "txdilation.session.session_errors.ConfigError": (ValueError,),
    "txdilation.session.session_errors.CannotStart": (ValueError,),
    "txdilation.session.command_line.StartRefused": (usage.UsageError,),
    "txdilation.mailbox.dilate_messages.MalformedDilationMessage": (ValueError,),
    "txdilation.pairing.hello.BadHello": (ValueError,),
    "txdilation.pairing.pairing_messages.BadPairingMessage": (ValueError,),
    "txdilation.pairing.meeting.StockMismatch": (RuntimeError,),
    "txdilation.selection.hints.HintError": (ValueError,),
    "txdilation.portmap.natpmp.NatPmpError": (ValueError,),
    "txdilation.portmap.pcp.PcpError": (ValueError,),
    "txdilation.portmap.ssdp.SsdpError": (ValueError,),
    "txdilation.portmap.igd.IgdError": (ValueError,),
    "txdilation.link.websocket.WebSocketHandshakeError": (ConnectError,),
    "txdilation.wire.dilation_errors.WormholeClosedError": (WormholeClosed,),
}

#: the exceptions stock's ``wormhole._dilation`` modules define, by module: the drop-in's
#: modules (``txdilation._stock``) expose each name
STOCK_NAMES = {
    "manager": (
        "OldPeerCannotDilateError",
        "CanOnlyDilateOnceError",
        "UnknownDilationMessageType",
        "UnexpectedKCM",
        "UnknownMessageType",
    ),
    "subchannel": (
        "AlreadyClosedError",
        "NormalCloseUsedOnHalfCloseable",
        "HalfCloseUsedOnNonHalfCloseable",
        "UnexpectedSubprotocol",
        "IllegalSubprotocolError",
    ),
    "inbound": (
        "DuplicateOpenError",
        "DataForMissingSubchannelError",
        "CloseForMissingSubchannelError",
    ),
}


def package_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the package, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(txdilation.__path__, "txdilation."):
        if info.name.startswith(NOT_IMPORTED):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("txdilation.")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


class FamilyTreeTests(SynchronousTestCase):
    """The tree holds every exception of the package."""

    def test_every_exception_is_in_one_family(self) -> None:
        """Each exception class the package defines is a TxdilationError of exactly one family
        (the base and the families themselves aside)."""
        found = package_exceptions()
        self.assertGreaterEqual(len(found), 40, "the walk no longer finds the exceptions")
        outside, several = [], []
        for name, cls in sorted(found.items()):
            if cls is TxdilationError or cls in FAMILIES:
                continue
            families = [f.__name__ for f in FAMILIES if issubclass(cls, f)]
            if not issubclass(cls, TxdilationError) or not families:
                outside.append(name)
            elif len(families) > 1:
                several.append(f"{name}: {families}")
        self.assertEqual(outside, [], "derive from a family of txdilation.errors")
        self.assertEqual(several, [])

    def test_bases_callers_catch_by_are_kept(self) -> None:
        """Each exception a caller could catch as ``ValueError``, ``RuntimeError``, Twisted's
        ``ConnectError``/``UsageError`` or ``WormholeClosed`` still is one."""
        found = package_exceptions()
        for name, bases in KEPT_BASES.items():
            self.assertIn(name, found)
            for base in bases:
                self.assertTrue(issubclass(found[name], base), f"{name} is no {base.__name__}")

    def test_the_drop_in_exposes_stock_names(self) -> None:
        """Every exception stock's ``wormhole._dilation`` defines is importable from the
        drop-in's module of the same name, as an Exception of the tree."""
        for module_name, names in STOCK_NAMES.items():
            module = importlib.import_module(f"txdilation._stock.{module_name}")
            for name in names:
                cls = getattr(module, name)
                self.assertTrue(issubclass(cls, TxdilationError), f"{module_name}.{name}")
                self.assertIn(name, module.__all__)

    def test_stock_names_for_events_are_the_real_errors(self) -> None:
        """Stock's names for a DILATE-n message of an unknown type and a record of an unknown
        kind are the errors txdilation raises for them."""
        from txdilation._stock.manager import UnknownDilationMessageType, UnknownMessageType
        from txdilation.mailbox.dilate_messages import parse_dilation_message
        from txdilation.wire.records import parse_record

        with self.assertRaises(UnknownDilationMessageType):
            parse_dilation_message(b'{"type": "no-such-type"}')
        with self.assertRaises(UnknownMessageType):
            parse_record(b"\xff")


class CatchByFamilyTests(SynchronousTestCase):
    """Real errors from the package, caught by their family (and their old base)."""

    def test_usage_mistake(self) -> None:
        """A value a person typed wrong is a UsageMistake, and still a ValueError."""
        from txdilation.values import parse_seconds

        with self.assertRaises(UsageMistake):
            parse_seconds("soon")
        with self.assertRaises(ValueError):
            parse_seconds("soon")

    def test_protocol_violation(self) -> None:
        """A malformed record, DILATE-n message or hint from a peer is a ProtocolViolation."""
        from txdilation.mailbox.dilate_messages import parse_dilation_message
        from txdilation.selection.hints import parse_hint
        from txdilation.wire.records import parse_record

        with self.assertRaises(ProtocolViolation):
            parse_record(b"")
        with self.assertRaises(ProtocolViolation):
            parse_dilation_message(b"not json")
        with self.assertRaises(ProtocolViolation):
            parse_hint({"type": "carrier-pigeon"})

    def test_pairing_failure(self) -> None:
        """A file that is no pairing file is a PairingFailure."""
        from txdilation.pairing.record import decode

        with self.assertRaises(PairingFailure):
            decode(b"hello", "pairing file x")

    def test_link_failure(self) -> None:
        """Opening a subchannel on a closed wormhole is a LinkFailure, and still stock's
        ``WormholeClosed``."""
        from txdilation.semantics import TWISTED
        from txdilation.subchannels.multiplexer import Multiplexer

        clock = Clock()
        mux = Multiplexer(manager=object(), reactor=clock, semantics=TWISTED)
        dilated = mux.when_dilated()
        mux.stop("closed by the test")
        clock.advance(0)
        factory = Factory.forProtocol(Protocol)
        with self.assertRaises(LinkFailure):
            mux.open_subchannel("chat", factory)
        with self.assertRaises(WormholeClosed):
            mux.open_subchannel("chat", factory)
        failure = self.failureResultOf(dilated)
        self.assertIsInstance(failure.value, LinkFailure)
