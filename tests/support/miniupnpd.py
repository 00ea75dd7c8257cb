"""
The real home-router daemon, Debian's miniupnpd (its nftables build), on a NAT of the namespace
tests: UPnP IGD v2 on the LAN, NAT-PMP and PCP on UDP 5351.

Layer: test infrastructure. ``start_miniupnpd(nat)`` runs ``miniupnpd -d`` (foreground, its log
on stderr, kept in a scratch file: without a syslog socket it would write to /dev/console) in a
NAT made with ``Network.nat(..., port_mapping=True)``, whose ruleset has the chains miniupnpd
fills (it creates none itself; Debian's script for them is broken) and whose WAN address is
public (miniupnpd refuses to map from a private or documentation address). It returns once the
daemon answers on its ports. ``forwards()`` lists the port forwards in the NAT's ruleset now
(empty once every mapping was deleted); the network kills the daemon at ``close()``, ``stop()``
sooner. Nothing is written outside the scratch directory (the lease file is there too).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.netns import Nat, NetnsError

MINIUPNPD = "/usr/sbin/miniupnpd"
HTTP_PORT = 5000
PMP_PORT = 5351
START_TIMEOUT = 10.0


def miniupnpd_available() -> bool:
    """Whether the daemon is installed (``.ci/run`` installs it)."""
    return Path(MINIUPNPD).exists() or shutil.which("miniupnpd") is not None


@dataclass
class MiniUpnpd:
    """miniupnpd running in ``nat`` (see the module docstring)."""

    nat: Nat
    process: subprocess.Popen[bytes]
    workdir: Path

    def forwards(self) -> list[str]:
        """The DNAT rules miniupnpd holds in the NAT's ruleset now, one line each."""
        listing = self.nat.run(["nft", "list", "chain", "inet", "txdn_nat", "prerouting_miniupnpd"])
        return [line.strip() for line in listing.splitlines() if "dnat" in line]

    def log_tail(self, limit: int = 3000) -> str:
        return (self.workdir / "miniupnpd.log").read_text(errors="replace")[-limit:]

    def stop(self) -> None:
        """End the daemon (what it mapped stays in the ruleset: a router that crashed)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_miniupnpd(
    nat: Nat,
    *,
    natpmp: bool = True,
    upnp: bool = True,
    min_lifetime: int = 120,
    max_lifetime: int = 86400,
) -> MiniUpnpd:
    """Run miniupnpd in ``nat`` (made with ``port_mapping=True``, its LAN link up).

    :param natpmp: answer NAT-PMP and PCP on UDP 5351.
    :param upnp: answer SSDP and UPnP IGD's SOAP on the LAN (HTTP port ``HTTP_PORT``).
    :param min_lifetime: the shortest PCP lease it grants (seconds).
    :param max_lifetime: the longest PCP lease it grants.
    :raises NetnsError: the daemon did not start answering within ``START_TIMEOUT``.
    """
    lan = [link.upper_if for link in nat.downlinks]
    if not lan:
        raise NetnsError(f"{nat.name} has no LAN link for miniupnpd to listen on")
    workdir = Path(tempfile.mkdtemp(prefix="txdn-miniupnpd-"))
    config = workdir / "miniupnpd.conf"
    config.write_text(
        "ext_ifname=wan0\n"
        + "".join(f"listening_ip={name}\n" for name in lan)
        + f"http_port={HTTP_PORT}\n"
        f"enable_natpmp={'yes' if natpmp else 'no'}\n"
        f"enable_upnp={'yes' if upnp else 'no'}\n"
        "ipv6_disable=yes\n"
        "secure_mode=yes\n"
        "system_uptime=no\n"
        f"lease_file={workdir / 'leases'}\n"
        "upnp_table_name=txdn_nat\n"
        "upnp_nat_table_name=txdn_nat\n"
        "upnp_forward_chain=miniupnpd\n"
        "upnp_nat_chain=prerouting_miniupnpd\n"
        "upnp_nat_postrouting_chain=postrouting_miniupnpd\n"
        f"min_lifetime={min_lifetime}\n"
        f"max_lifetime={max_lifetime}\n"
        "uuid=3c9b1f52-7f7e-4b7c-9d1e-0a5d5e5f6a31\n"
        "allow 1024-65535 192.168.0.0/16 1024-65535\n"
        "deny 0-65535 0.0.0.0/0 0-65535\n"
    )
    log = (workdir / "miniupnpd.log").open("wb")
    argv = [MINIUPNPD, "-f", str(config), "-d", "-P", str(workdir / "pid")]
    process = nat.popen(argv, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    daemon = MiniUpnpd(nat, process, workdir)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        ready = (not natpmp or _listening(nat, "-uln", PMP_PORT)) and (
            not upnp or _listening(nat, "-tln", HTTP_PORT)
        )
        if ready:
            return daemon
        if process.poll() is not None or time.monotonic() > deadline:
            tail = daemon.log_tail()
            daemon.stop()
            raise NetnsError(f"miniupnpd did not start in {nat.name}: {tail}")
        time.sleep(0.05)


def _listening(nat: Nat, flags: str, port: int) -> bool:
    return bool(nat.run(["ss", "-H", flags, f"sport = :{port}"]).strip())
