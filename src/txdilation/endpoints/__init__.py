"""``dilation:`` Twisted endpoints: serve or connect over a subchannel of a dilated wormhole.

Layer: application edge (the Twisted endpoint API over the public wormhole API). Any Twisted
program that takes an endpoint string can use Dilation without code (docs/endpoints.md)::

    twistd -n web --path . --listen 'dilation:subprotocol=http:code-file=code.txt'
    clientFromString(reactor, "dilation:subprotocol=http:code=7-guitarist-revenge")

This package re-exports what programs and the parsers in
``twisted/plugins/txdilation_endpoints.py`` use: :mod:`.listening` (the server endpoint),
:mod:`.connecting` (the client endpoint), :mod:`.strings` (strings, failures in words),
:mod:`.endpoint_settings` (the keys, checked), :mod:`.shared` and :mod:`.registry` (one shared
wormhole per code, closed when unused). Endpoints share TWISTED semantics and log as a session does.
"""

from __future__ import annotations

from txdilation.endpoints.connecting import DilationClientEndpoint
from txdilation.endpoints.endpoint_settings import (
    DEFAULT_APPID,
    DEFAULT_CLIENT_TIMEOUT,
    EndpointSettings,
    parse_settings,
)
from txdilation.endpoints.listening import (
    DilationAddress,
    DilationListeningPort,
    DilationServerEndpoint,
)
from txdilation.endpoints.shared import NAMESPACE
from txdilation.endpoints.strings import EXIT_USAGE, in_words, settings_from_string

__all__ = [
    "DEFAULT_APPID",
    "DEFAULT_CLIENT_TIMEOUT",
    "EXIT_USAGE",
    "NAMESPACE",
    "DilationAddress",
    "DilationClientEndpoint",
    "DilationListeningPort",
    "DilationServerEndpoint",
    "EndpointSettings",
    "in_words",
    "parse_settings",
    "settings_from_string",
]
