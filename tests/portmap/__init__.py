"""Tests of ``txdilation.portmap`` (one file per module; the namespace tests with miniupnpd
are ``tests/test_portmap.py``)."""
