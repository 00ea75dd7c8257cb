"""Twisted endpoint-string plugins ``dilation:`` (client and server) for txdilation.

``serverFromString(reactor, "dilation:subprotocol=http:code-file=code.txt")`` and
``clientFromString(reactor, "dilation:subprotocol=http:code=7-guitarist-revenge")`` build the
endpoints of :mod:`txdilation.endpoints` (see docs/endpoints.md). This module stays
light: twistd and ``getPlugins`` import it to list plugins, so the endpoints' code (and
``wormhole``) load only when a ``dilation:`` string is parsed.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import (
    IStreamClientEndpointStringParserWithReactor,
    IStreamServerEndpointStringParser,
)
from twisted.plugin import IPlugin
from zope.interface import implementer


@implementer(IPlugin, IStreamServerEndpointStringParser)
class DilationServerParser:
    """``dilation:subprotocol=NAME[:key=value...]`` as a server endpoint."""

    prefix = "dilation"

    def parseStreamServer(self, reactor: Any, *args: str, **kwargs: str) -> Any:
        from txdilation.endpoints import DilationServerEndpoint, settings_from_string

        settings = settings_from_string(reactor, args, kwargs, client=False)
        return DilationServerEndpoint(reactor, settings)


@implementer(IPlugin, IStreamClientEndpointStringParserWithReactor)
class DilationClientParser:
    """``dilation:subprotocol=NAME[:key=value...]`` as a client endpoint."""

    prefix = "dilation"

    def parseStreamClient(self, reactor: Any, *args: str, **kwargs: str) -> Any:
        from txdilation.endpoints import DilationClientEndpoint, settings_from_string

        settings = settings_from_string(reactor, args, kwargs, client=True)
        return DilationClientEndpoint(reactor, settings)


dilationServer = DilationServerParser()
dilationClient = DilationClientParser()
