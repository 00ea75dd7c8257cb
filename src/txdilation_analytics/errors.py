"""Errors of the analytics pipeline that the CLI reports as one clear line (exit status 2)."""

from __future__ import annotations


class InputError(Exception):
    """A missing, unreadable or malformed input, or a stage run before its inputs exist."""
