"""Tests of ``txdilation.selection`` (one file per module)."""
