"""Tests for txdilation.wire.limits: the shared limits agree with the codec they bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.wire.limits import RECORD_OVERHEAD
from txdilation.wire.records import Close, Data, Open, encode_record


class RecordOverheadTests(SynchronousTestCase):
    @given(st.integers(0, 2**32 - 1), st.integers(1, 2**32 - 1), st.binary(max_size=64))
    def test_overhead_is_the_encoded_header(self, seqnum: int, scid: int, data: bytes) -> None:
        """A DATA record encodes to RECORD_OVERHEAD bytes plus its payload, a CLOSE to
        RECORD_OVERHEAD, an OPEN to RECORD_OVERHEAD plus its name's UTF-8 bytes (what the
        durable queue counts and a write's size limit subtracts)."""
        self.assertEqual(len(encode_record(Data(seqnum, scid, data))), RECORD_OVERHEAD + len(data))
        self.assertEqual(len(encode_record(Close(seqnum, scid))), RECORD_OVERHEAD)
        name = data.decode("latin-1")
        self.assertEqual(
            len(encode_record(Open(seqnum, scid, name))), RECORD_OVERHEAD + len(name.encode())
        )
