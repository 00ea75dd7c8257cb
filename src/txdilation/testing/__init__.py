"""Test doubles for txdilation's internal contracts (shipped so that every test suite can share
them; each is checked against its interface with ``zope.interface.verify.verifyObject``)."""
