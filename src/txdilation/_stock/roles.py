"""``wormhole._dilation.roles``: the two roles."""

from __future__ import annotations

from txdilation.wire.roles import FOLLOWER, LEADER, Role

__all__ = ["FOLLOWER", "LEADER", "Role"]
