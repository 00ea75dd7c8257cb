"""Tests for txdilation.wire.dilation_errors: the exception families callers catch by."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase
from wormhole.errors import WormholeClosed

from txdilation.wire import dilation_errors as errors


class ErrorFamilyTests(SynchronousTestCase):
    def test_wire_errors_are_protocol_errors(self) -> None:
        """Every error about what the peer sent (framing, records, Noise, OPEN/DATA/CLOSE
        for the wrong subchannel) is a DilationProtocolError: the glue that catches one drops
        that connection."""
        for error in (
            errors.FramingError,
            errors.RecordError,
            errors.NoiseError,
            errors.DuplicateOpenError,
            errors.DataForMissingSubchannelError,
            errors.CloseForMissingSubchannelError,
        ):
            self.assertTrue(issubclass(error, errors.DilationProtocolError), error)

    def test_application_errors_are_not(self) -> None:
        """Errors an application sees are not protocol errors (they never drop a link)."""
        for error in (
            errors.AlreadyClosedError,
            errors.NormalCloseUsedOnHalfCloseable,
            errors.HalfCloseUsedOnNonHalfCloseable,
            errors.OldPeerCannotDilateError,
            errors.WormholeClosedError,
        ):
            self.assertFalse(issubclass(error, errors.DilationProtocolError), error)

    def test_wormhole_closed_is_stocks(self) -> None:
        """WormholeClosedError is a wormhole.errors.WormholeClosed: handlers written for
        stock's errors catch it."""
        self.assertIsInstance(errors.WormholeClosedError("closed"), WormholeClosed)
