"""Confines test subprocesses to 127.0.0.1 (put this directory on their ``PYTHONPATH``).

Layer: test infrastructure. Applications such as fowl hard-code magic-wormhole's public
transit relay (``wormhole.cli.public_relay.TRANSIT_RELAY``) and stock magic-wormhole listens on
every interface and advertises every address it finds. A test must never send traffic
anywhere but loopback, so every Python process started with this directory on ``PYTHONPATH``
gets, at start-up:

- with ``TXDILATION_TEST_TRANSIT_RELAY=tcp:127.0.0.1:PORT``: that relay as the public one;
- when stock magic-wormhole's dilation is in use (txdilation not installed): its address
  discovery limited to 127.0.0.1 and its listener bound to 127.0.0.1 (as
  ``tests.support.harness.stock_loopback``). txdilation is confined by its own environment.

Then the next ``sitecustomize`` on ``sys.path`` runs (txdilation's drop-in one comes first when
both are used, and chains to this one).
"""

from __future__ import annotations


def _confine() -> None:
    import os

    relay = os.environ.get("TXDILATION_TEST_TRANSIT_RELAY")
    if not relay:
        return
    import wormhole.cli.public_relay as public_relay

    public_relay.TRANSIT_RELAY = relay
    from wormhole._dilation import connector

    stock_server_from_string = getattr(connector, "serverFromString", None)
    if stock_server_from_string is None or not connector.__name__.startswith("wormhole."):
        return  # txdilation's connector

    def loopback_server_from_string(reactor: object, description: str) -> object:
        if description.startswith("tcp:") and "interface=" not in description:
            description += ":interface=127.0.0.1"
        return stock_server_from_string(reactor, description)

    connector.ipaddrs.find_addresses = lambda: ["127.0.0.1"]
    connector.serverFromString = loopback_server_from_string


def _chain_to_next_sitecustomize() -> None:
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_confine()
_chain_to_next_sitecustomize()
