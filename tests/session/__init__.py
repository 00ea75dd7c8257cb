"""Tests of ``txdilation.session`` and of the processes built on it."""
