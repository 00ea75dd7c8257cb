"""
Small network probes run inside a namespace: ``python -m tests.support.probe COMMAND ...``.

Layer: test infrastructure. Each command prints JSON lines on stdout and exits by itself within
its ``--timeout`` (or the flood's own bound); none of them needs anything but the standard library.

- ``ping ADDRESS``: ICMP/ICMPv6 echo requests from a raw socket (root; there may be no ``ping``
  program); prints ``{"sent": n, "received": n, "rtt": [seconds, ...]}``.
- ``serve ADDRESS PORT``: listen on TCP, print ``{"listening": [host, port]}``, then
  ``{"peer": [host, port]}`` for each accepted connection (closed at once) until ``--count``.
- ``connect ADDRESS PORT``: connect (from ``--source-port`` if given; its SYNs with an IP
  TTL / hop limit of ``--ttl`` if given) and print ``{"ok": true, "local": [host, port]}``
  or ``{"ok": false, "error": "...", "after": seconds}``.
- ``flood ADDRESS PORT``: open ``--count`` connections within ``--within`` seconds, a fraction
  of them (``--garbage``) writing 64 bytes of garbage; watch each for ``--watch`` seconds after
  it connected and report how many were refused, never connected, and closed or left open.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import selectors
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ICMP_ECHO, ICMP_ECHO_REPLY = 8, 0
ICMP6_ECHO, ICMP6_ECHO_REPLY = 128, 129
GARBAGE_BYTES = 64


def emit(**fields: Any) -> None:
    """Print one JSON line and flush."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def ping(address: str, count: int, interval: float, timeout: float) -> dict[str, Any]:
    """Send ``count`` echo requests; each waits up to ``timeout`` s for its reply."""
    v6 = _family(address) == socket.AF_INET6
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    ident = os.getpid() & 0xFFFF
    rtts: list[float] = []
    with socket.socket(_family(address), socket.SOCK_RAW, proto) as s:
        for seq in range(count):
            header = struct.pack("!BBHHH", ICMP6_ECHO if v6 else ICMP_ECHO, 0, 0, ident, seq)
            packet = header + b"txdilation-probe"
            if not v6:  # the kernel fills in ICMPv6 checksums itself
                packet = packet[:2] + struct.pack("!H", checksum(packet)) + packet[4:]
            sent = time.monotonic()
            s.sendto(packet, (address, 0))
            while (left := sent + timeout - time.monotonic()) > 0:
                s.settimeout(left)
                try:
                    data, _ = s.recvfrom(2048)
                except TimeoutError:
                    break
                icmp = data if v6 else data[(data[0] & 0x0F) * 4 :]
                kind, _, _, got_ident, got_seq = struct.unpack("!BBHHH", icmp[:8])
                reply = ICMP6_ECHO_REPLY if v6 else ICMP_ECHO_REPLY
                if kind == reply and got_ident == ident and got_seq == seq:
                    rtts.append(time.monotonic() - sent)
                    break
            if seq + 1 < count:
                time.sleep(interval)
    return {"sent": count, "received": len(rtts), "rtt": [round(r, 6) for r in rtts]}


def serve(address: str, port: int, count: int, timeout: float) -> None:
    """Accept up to ``count`` connections within ``timeout`` s, reporting each peer."""
    with socket.socket(_family(address), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        s.listen(64)
        emit(listening=list(s.getsockname()[:2]))
        ends = time.monotonic() + timeout
        for _ in range(count):
            left = ends - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                conn, peer = s.accept()
            except TimeoutError:
                break
            conn.close()
            emit(peer=list(peer[:2]))


def connect(
    address: str, port: int, source_port: int | None, timeout: float, ttl: int | None = None
) -> dict[str, Any]:
    """One TCP connection, closed at once; what happened."""
    v6 = _family(address) == socket.AF_INET6
    with socket.socket(_family(address), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if source_port is not None:
            s.bind(("::" if v6 else "0.0.0.0", source_port))
        if ttl is not None:
            level, name = (
                (socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS)
                if v6
                else (socket.IPPROTO_IP, socket.IP_TTL)
            )
            s.setsockopt(level, name, ttl)
        s.settimeout(timeout)
        started = time.monotonic()
        try:
            s.connect((address, port))
        except OSError as e:
            after = round(time.monotonic() - started, 3)
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "after": after}
        return {"ok": True, "local": list(s.getsockname()[:2])}


@dataclass
class _Attempt:
    index: int
    garbage: bool
    sock: socket.socket
    started: float
    connected: float | None = None
    outcome: str = "pending"  # connected, refused, error, timeout
    closed_after: float | None = None  # seconds from connecting to the server closing it


@dataclass
class _Flood:
    attempts: list[_Attempt] = field(default_factory=list)

    def report(self, watch: float) -> dict[str, Any]:
        def group(garbage: bool) -> dict[str, Any]:
            mine = [a for a in self.attempts if a.garbage == garbage and a.connected is not None]
            closed = [a.closed_after for a in mine if a.closed_after is not None]
            return {
                "connected": len(mine),
                "closed_within_watch": len(closed),
                "open_after_watch": len(mine) - len(closed),
                "slowest_close": round(max(closed), 3) if closed else None,
            }

        outcomes = [a.outcome for a in self.attempts]
        connect_times = [a.connected - a.started for a in self.attempts if a.connected is not None]
        return {
            "attempted": len(self.attempts),
            "connected": outcomes.count("connected"),
            "refused": outcomes.count("refused"),
            "errors": outcomes.count("error"),
            "never_connected": outcomes.count("timeout") + outcomes.count("pending"),
            "slow_connects": sum(1 for t in connect_times if t > 0.9),  # a SYN was retried
            "garbage": group(True),
            "idle": group(False),
            "watch": watch,
        }


def flood(
    address: str, port: int, count: int, within: float, garbage: float, watch: float
) -> dict[str, Any]:
    """See the module docstring; everything is closed before this returns."""
    rng = random.Random(1)
    chosen = set(rng.sample(range(count), round(count * garbage)))
    selector = selectors.DefaultSelector()
    result = _Flood()
    started = time.monotonic()
    ends = started + within + watch + 1.0
    next_index = 0
    try:
        while time.monotonic() < ends:
            now = time.monotonic()
            while next_index < count and now >= started + within * next_index / count:
                sock = socket.socket(_family(address), socket.SOCK_STREAM)
                sock.setblocking(False)
                attempt = _Attempt(next_index, next_index in chosen, sock, now)
                result.attempts.append(attempt)
                code = sock.connect_ex((address, port))
                if code not in (0, errno.EINPROGRESS):
                    attempt.outcome = "refused" if code == errno.ECONNREFUSED else "error"
                else:
                    selector.register(sock, selectors.EVENT_WRITE, attempt)
                next_index += 1
            for key, _ in selector.select(timeout=0.005):
                _flood_event(selector, key.data, time.monotonic())
            now = time.monotonic()
            for attempt in result.attempts:
                _flood_expire(selector, attempt, now, watch)
            if next_index == count and not selector.get_map():
                break
    finally:
        for attempt in result.attempts:
            if attempt.outcome == "pending":
                attempt.outcome = "timeout"
            attempt.sock.close()
        selector.close()
    return result.report(watch)


def _flood_event(selector: selectors.BaseSelector, attempt: _Attempt, now: float) -> None:
    sock = attempt.sock
    if attempt.connected is None:
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code != 0:
            attempt.outcome = "refused" if code == errno.ECONNREFUSED else "error"
            selector.unregister(sock)
            return
        attempt.connected, attempt.outcome = now, "connected"
        if attempt.garbage:
            with contextlib.suppress(OSError):
                sock.send(random.Random(attempt.index).randbytes(GARBAGE_BYTES))
        selector.modify(sock, selectors.EVENT_READ, attempt)
        return
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if not data:  # the server closed (FIN) or reset it
        attempt.closed_after = now - attempt.connected
        selector.unregister(sock)


def _flood_expire(
    selector: selectors.BaseSelector, attempt: _Attempt, now: float, watch: float
) -> None:
    """Stop watching a connection whose time is up (connecting, or connected and silent)."""
    if attempt.sock.fileno() < 0 or attempt.outcome not in ("pending", "connected"):
        return
    since = attempt.connected if attempt.connected is not None else attempt.started
    if now - since > watch and attempt.closed_after is None:
        try:
            selector.unregister(attempt.sock)
        except (KeyError, ValueError):
            return
        if attempt.connected is None:
            attempt.outcome = "timeout"


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one probe."""
    p = argparse.ArgumentParser(prog="python -m tests.support.probe")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("ping")
    c.add_argument("address")
    c.add_argument("--count", type=int, default=1)
    c.add_argument("--interval", type=float, default=0.2)
    c.add_argument("--timeout", type=float, default=2.0)
    for name in ("serve", "connect", "flood"):
        c = sub.add_parser(name)
        c.add_argument("address")
        c.add_argument("port", type=int)
        c.add_argument("--timeout", type=float, default=10.0)
        c.add_argument("--count", type=int, default=1)
        c.add_argument("--source-port", type=int, default=None)
        c.add_argument("--ttl", type=int, default=None)
        c.add_argument("--within", type=float, default=1.0)
        c.add_argument("--garbage", type=float, default=0.5)
        c.add_argument("--watch", type=float, default=5.0)
    args = p.parse_args(argv)
    if args.command == "ping":
        emit(**ping(args.address, args.count, args.interval, args.timeout))
    elif args.command == "serve":
        serve(args.address, args.port, args.count, args.timeout)
    elif args.command == "connect":
        emit(**connect(args.address, args.port, args.source_port, args.timeout, args.ttl))
    else:
        emit(**flood(args.address, args.port, args.count, args.within, args.garbage, args.watch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
