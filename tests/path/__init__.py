"""Tests of ``txdilation.path`` (one file per module)."""
