"""Test infrastructure shared by several test modules (harnesses, peers, scenarios)."""
