"""The two roles of a dilated wormhole: the Leader (higher dilation side) and the Follower."""

from __future__ import annotations

import enum


class Role(enum.Enum):
    """Which side of the dilation we are; decided once per wormhole from the two sides."""

    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"

    def __repr__(self) -> str:
        return f"Role({self.value})"


LEADER = Role.LEADER
FOLLOWER = Role.FOLLOWER

__all__ = ["FOLLOWER", "LEADER", "Role"]
