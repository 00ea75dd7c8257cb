"""Tests of ``txdilation.testing`` (one file per module)."""
