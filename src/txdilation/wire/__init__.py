"""Shared by every layer: the records and their byte layouts, roles, key derivations,
limits, the exceptions, and the contracts (interfaces) between layers. Imports nothing above.
"""
