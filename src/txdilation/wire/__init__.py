"""Shared by every layer: records, roles, keys, limits, errors, contracts; imports nothing above."""
