"""Tests of ``txdilation.mailbox`` (one file per module)."""
