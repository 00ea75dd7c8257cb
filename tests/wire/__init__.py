"""Tests of ``txdilation.wire`` (one file per module)."""
