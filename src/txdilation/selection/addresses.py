"""L3: this host's IPv6 addresses, for direct hints (stock's ``wormhole.ipaddrs`` finds IPv4 only).

:func:`ipv6_addresses` reads ``/proc/net/if_inet6`` (Linux); elsewhere, or when it cannot be
read, it finds none. :func:`parse_if_inet6` is the I/O-free part.

Invariants: only global-scope addresses are returned (no loopback, link-local or site-local
ones: a hint with a scope would need an interface the peer does not share), none that is
tentative, deprecated or failed duplicate-address detection, each once, in the file's order.
Callers run it off the reactor thread (it opens a file), as they run stock's discovery.
"""

from __future__ import annotations

import ipaddress

__all__ = ["IF_INET6", "ipv6_addresses", "parse_if_inet6"]

IF_INET6 = "/proc/net/if_inet6"

_SCOPE_GLOBAL = 0x00
# IFA_F_DADFAILED 0x08, IFA_F_DEPRECATED 0x20, IFA_F_TENTATIVE 0x40
_UNUSABLE_FLAGS = 0x08 | 0x20 | 0x40


def parse_if_inet6(text: str) -> list[str]:
    """The usable global addresses in the text of ``/proc/net/if_inet6``
    (``address ifindex prefixlen scope flags name`` per line, the address as 32 hex digits)."""
    found: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or len(fields[0]) != 32:
            continue
        try:
            address = ipaddress.IPv6Address(int(fields[0], 16))
            scope, flags = int(fields[3], 16), int(fields[4], 16)
        except ValueError:
            continue
        if scope != _SCOPE_GLOBAL or flags & _UNUSABLE_FLAGS:
            continue
        if address.is_loopback or address.is_link_local or address.ipv4_mapped is not None:
            continue
        text_form = str(address)
        if text_form not in found:
            found.append(text_form)
    return found


def ipv6_addresses(path: str = IF_INET6) -> list[str]:
    """This host's usable global IPv6 addresses (none where ``path`` cannot be read)."""
    try:
        with open(path) as f:
            return parse_if_inet6(f.read())
    except OSError:
        return []
