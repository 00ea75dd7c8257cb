"""
A userspace link delayer: delay, jitter and loss for kernels without ``tc netem``.

Layer: test infrastructure, run as ``python -m tests.support.linkdelay UP_DEV DOWN_DEV`` inside
the router namespace by ``tests.support.netns.Network.impair`` (which also installs the policy
routing that sends a link's forwarded packets into these devices).

It creates two TUN devices (IPv4 and IPv6 packets, no packet information header): every packet
the kernel routes into ``UP_DEV`` (sent by the node) or ``DOWN_DEV`` (to the node) is held for
its direction's delay (plus uniform jitter, order kept: a packet never overtakes an earlier one)
and written back into the same device, from where the kernel forwards it on; a lost packet is
just not written back. The kernel segments large packets before handing them to a TUN device
without offloads, so what comes out is always a valid IP packet.

Protocol: stdin carries JSON lines ``{"up": {"delay": s, "jitter": s, "loss": p}, "down": ...}``;
the first must arrive before it prints ``ready``; later ones change the shape at once. At the
end of stdin it delivers what it holds at once and exits (the devices disappear with it).
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import os
import random
import select
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MAX_PACKET = 65536
IDLE_WAIT = 1.0


@dataclass
class Direction:
    """One device's shape and the time its last queued packet is due (to keep order)."""

    fd: int
    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    last_due: float = 0.0

    def configure(self, shape: dict[str, float]) -> None:
        """Take a new shape (``delay``, ``jitter``, ``loss``; missing keys mean 0)."""
        self.delay = float(shape.get("delay", 0.0))
        self.jitter = float(shape.get("jitter", 0.0))
        self.loss = float(shape.get("loss", 0.0))

    def due(self, now: float, rng: random.Random) -> float | None:
        """When a packet read ``now`` goes out, or ``None`` if it is lost."""
        if self.loss and rng.random() < self.loss:
            return None
        wobble = rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        self.last_due = max(self.last_due, now + self.delay + wobble)
        return self.last_due


def open_tun(name: str) -> int:
    """Create TUN device ``name`` (it lives as long as the returned descriptor)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def deliver(fd: int, packet: bytes) -> None:
    """Write a packet back into its device; a refused one is lost, as on a real link."""
    with contextlib.suppress(OSError):
        os.write(fd, packet)


def take_lines(buffer: bytes, handle: Callable[[str], None]) -> bytes:
    """Hand every complete non-empty line of ``buffer`` to ``handle``; returns the rest."""
    *lines, rest = buffer.split(b"\n")
    for line in lines:
        if line.strip():
            handle(line.decode())
    return rest


def main(argv: list[str]) -> int:
    """Run the delayer (see the module docstring); returns the exit status."""
    if len(argv) != 2:
        print("usage: python -m tests.support.linkdelay UP_DEV DOWN_DEV", file=sys.stderr)
        return 2
    up, down = Direction(open_tun(argv[0])), Direction(open_tun(argv[1]))

    def configure(line: str) -> None:
        shapes = json.loads(line)
        up.configure(shapes.get("up", {}))
        down.configure(shapes.get("down", {}))

    stdin = sys.stdin.fileno()
    pending = b""
    while b"\n" not in pending:  # the first shape, before anything else
        chunk = os.read(stdin, 65536)
        if not chunk:
            return 0
        pending += chunk
    pending = take_lines(pending, configure)
    os.set_blocking(stdin, False)
    sys.stdout.write("ready\n")
    sys.stdout.flush()

    rng = random.Random()
    queue: list[tuple[float, int, int, bytes]] = []
    serial = 0
    while True:
        now = time.monotonic()
        wait = max(0.0, queue[0][0] - now) if queue else IDLE_WAIT
        readable, _, _ = select.select([up.fd, down.fd, stdin], [], [], wait)
        for fd in readable:
            if fd == stdin:
                chunk = os.read(stdin, 65536)
                if not chunk:  # end of stdin: deliver what we hold and go
                    for _, _, out, packet in sorted(queue):
                        deliver(out, packet)
                    return 0
                pending = take_lines(pending + chunk, configure)
                continue
            direction = up if fd == up.fd else down
            while True:
                try:
                    packet = os.read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                due = direction.due(time.monotonic(), rng)
                if due is not None:
                    serial += 1
                    heapq.heappush(queue, (due, serial, fd, packet))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, packet = heapq.heappop(queue)
            deliver(out, packet)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
