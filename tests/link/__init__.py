"""Tests of ``txdilation.link`` (one file per module)."""
