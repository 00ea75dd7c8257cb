"""L3: the addresses direct hints advertise: this host's IPv6 ones (stock's ``wormhole.ipaddrs``
finds IPv4 only), and those a listener bound to one interface takes.

:func:`ipv6_addresses` reads ``/proc/net/if_inet6`` (Linux); elsewhere, or when it cannot be
read, it finds none. :func:`parse_if_inet6` is the I/O-free part. :func:`bound_addresses` is the
address a listener bound to one interface (``listen_interface``) is reached at, and
:func:`unreachable_listener` says in one line when the advertised addresses cannot reach it.

Invariants: only global-scope addresses are returned (no loopback, link-local or site-local
ones: a hint with a scope would need an interface the peer does not share), none that is
tentative, deprecated or failed duplicate-address detection, each once, in the file's order.
Callers run it off the reactor thread (it opens a file), as they run stock's discovery.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from txdilation.settings import NetworkSettings

__all__ = [
    "IF_INET6",
    "bound_addresses",
    "ipv6_addresses",
    "parse_if_inet6",
    "unreachable_listener",
]

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


def bound_addresses(interface: str | None) -> list[str] | None:
    """The addresses a listener bound to ``interface`` takes connections on, when it is bound
    to one address: that address (in its normal form); None when it takes every address of
    this host (no interface, ``0.0.0.0``, ``::``) or ``interface`` is not an IP address."""
    try:
        address = ipaddress.ip_address((interface or "").strip().strip("[]"))
    except ValueError:
        return None
    return None if address.is_unspecified else [str(address)]


def unreachable_listener(network: NetworkSettings) -> str | None:
    """Why the peer could never reach our listener at the addresses we advertise, in one line;
    None when it can (or may: a ``hint_port`` says a port forward leads to the listener)."""
    bound = bound_addresses(network.listen_interface)
    configured = network.hint_addresses
    if bound is None or configured is None or network.hint_port is not None:
        return None
    advertised = {str(ipaddress.ip_address(a)) if _is_ip(a) else a for a in configured}
    if advertised & set(bound):
        return None
    return (
        f"the listener binds only {bound[0]} (listen-interface) but the hints advertise "
        f"{', '.join(configured)} (hint-addresses): the peer cannot connect to this side "
        f"directly; advertise {bound[0]} too, or give hint-port if a port forward leads there"
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
