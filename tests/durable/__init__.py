"""Tests of ``txdilation.durable`` (one file per module)."""
