"""Tests of ``txdilation.subchannels`` (one file per module)."""
