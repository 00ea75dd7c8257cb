"""
The real magic-wormhole mailbox server and transit relay as processes inside a namespace.

Layer: test infrastructure. ``start_servers(node)`` runs ``python -m twisted wormhole-mailbox``
and ``python -m twisted transitrelay`` (the servers' own twist plugins, no twistd, no pid file)
inside ``node``'s namespace, listening on every address of that namespace (``::``, both
families; those addresses exist only there), and returns once both accept connections. They
are tracked by the node's ``Network`` (killed at its ``close()``); ``stop()`` ends them sooner.
Their logs are kept in a scratch directory (``log_tail()`` for failure messages).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.netns import NetnsError, Node, python_environment

MAILBOX_PORT = 4000
RELAY_PORT = 4001
START_TIMEOUT = 30.0


@dataclass
class NamespacedServers:
    """A mailbox server and a transit relay running inside ``node``."""

    node: Node
    address: str
    mailbox_port: int
    relay_port: int
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    websocket_port: int | None = None

    @property
    def mailbox_url(self) -> str:
        """The mailbox server's websocket URL at ``address``."""
        return f"ws://{_host(self.address)}:{self.mailbox_port}/v1"

    @property
    def relay_hint(self) -> str:
        """The transit relay as ``dilate(transit_relay_location=)`` takes it."""
        return f"tcp:{_host(self.address)}:{self.relay_port}"

    @property
    def relay_ws_url(self) -> str:
        """The transit relay's WebSocket URL (``start_servers(websocket_port=...)``)."""
        if self.websocket_port is None:
            raise NetnsError("the relay was started without a WebSocket port")
        return f"ws://{_host(self.address)}:{self.websocket_port}/"

    def log_tail(self, limit: int = 3000) -> str:
        """The end of both servers' logs."""
        return "\n".join(
            f"--- {log.name}:\n{log.read_text(errors='replace')[-limit:]}"
            for log in sorted(self.workdir.glob("*.log"))
        )

    def stop(self) -> None:
        """End both servers and remove the scratch directory. Idempotent."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5.0)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def start_servers(
    node: Node,
    *,
    address: str | None = None,
    mailbox_port: int = MAILBOX_PORT,
    relay_port: int = RELAY_PORT,
    websocket_port: int | None = None,
    timeout: float = START_TIMEOUT,
) -> NamespacedServers:
    """
    Start the mailbox server and transit relay inside ``node`` and wait until both listen.

    :param address: the address clients are told (default ``node.address``); the servers
        listen on all of the namespace's addresses.
    :param websocket_port: also let the relay accept WebSocket connections on this port
        (``transitrelay --websocket``; ``relay_ws_url`` is then its URL).
    :raises NetnsError: if either exits or is not listening within ``timeout`` seconds (it
        is stopped; its log is in the message).
    """
    workdir = Path(tempfile.mkdtemp(prefix="txdn-servers-"))
    servers = NamespacedServers(
        node,
        address or node.address,
        mailbox_port,
        relay_port,
        workdir=workdir,
        websocket_port=websocket_port,
    )
    commands = {
        "mailbox": [
            "wormhole-mailbox",
            f"--port=tcp6:{mailbox_port}:interface=\\:\\:",
            f"--channel-db={workdir / 'channel.sqlite'}",
        ],
        "relay": ["transitrelay", f"--port=tcp6:{relay_port}:interface=\\:\\:"],
    }
    if websocket_port is not None:
        commands["relay"] += [
            f"--websocket=tcp6:{websocket_port}:interface=\\:\\:",
            f"--websocket-url={servers.relay_ws_url}",
        ]
    for name, plugin in commands.items():
        log = (workdir / f"{name}.log").open("wb")
        argv = [sys.executable, "-m", "twisted", "--log-format=text", *plugin]
        servers.processes.append(
            node.popen(argv, env=python_environment(), stdout=log, stderr=subprocess.STDOUT)
        )
        log.close()  # the child has its own descriptor
    deadline = time.monotonic() + timeout
    waiting = {mailbox_port, relay_port, *([websocket_port] if websocket_port else [])}
    while waiting:
        if any(p.poll() is not None for p in servers.processes) or time.monotonic() > deadline:
            tail = servers.log_tail()
            servers.stop()
            raise NetnsError(f"servers in {node.name} did not start within {timeout} s:\n{tail}")
        waiting = {port for port in waiting if not node.listening(port)}
        if waiting:
            time.sleep(0.1)
    return servers
