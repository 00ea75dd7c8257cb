"""Fetch a web page served over a dilated wormhole, through a ``dilation:`` endpoint string.

Any Twisted program that takes an endpoint string serves over Dilation without code. Serve a
directory with twistd's own web server; the code it allocates goes to the log and to a file:

    twistd -n web --path ./site --listen 'dilation:subprotocol=http:code-file=code.txt'

and fetch from it, anywhere, with the code (this script; ``clientFromString`` does the rest):

    python examples/endpoint_fetch.py "dilation:subprotocol=http:code=$(cat code.txt)" /index.html

Several ``dilation:`` endpoints naming the same code share one wormhole, in the server (one
``--listen`` per subprotocol, each its own listening port) as in the client (each pair of
arguments here is an endpoint and a path to fetch through it)::

    twistd -n web --path ./site --listen 'dilation:subprotocol=http:code-file=code.txt' \
        --listen 'dilation:subprotocol=http-admin:code-file=code.txt'
    python examples/endpoint_fetch.py "dilation:subprotocol=http:code=$C" /index.html \
        "dilation:subprotocol=http-admin:code=$C" /status.txt

Other mailbox servers and relays go in the string too, colons escaped with a backslash:
``dilation:subprotocol=http:code=...:mailbox=ws\\://127.0.0.1\\:4000/v1:relay=tcp\\:127.0.0.1\\:4001``
(docs/endpoints.md lists every key). Prints each response; exits 0 if all were 200.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from twisted.internet.defer import ensureDeferred
from twisted.internet.endpoints import clientFromString
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.task import react
from twisted.web.client import Agent, readBody
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

# readBody warns when the transport cannot abortConnection(); subchannels cannot (yet)
warnings.filterwarnings("ignore", "Using readBody with a transport", DeprecationWarning)


@implementer(IAgentEndpointFactory)
class Through:
    """Every request goes through one endpoint (here: a subchannel of the wormhole)."""

    def __init__(self, endpoint: IStreamClientEndpoint) -> None:
        self.endpoint = endpoint

    def endpointForURI(self, uri: Any) -> IStreamClientEndpoint:
        return self.endpoint


async def main(reactor: Any, pairs: list[tuple[str, str]]) -> None:
    failed = False
    for description, path in pairs:
        endpoint = clientFromString(reactor, description)  # "dilation:..." -> txdilation's plugin
        agent = Agent.usingEndpointFactory(reactor, Through(endpoint))
        response = await agent.request(b"GET", b"http://dilated" + path.encode())
        body = await readBody(response)
        print(f"GET {path}: HTTP {response.code}")
        print(body.decode(errors="replace"), end="", flush=True)
        failed = failed or response.code != 200
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if len(arguments) == 1:
        arguments.append("/")
    if not arguments or len(arguments) % 2:
        sys.exit(f"usage: {sys.argv[0]} DILATION_ENDPOINT PATH [DILATION_ENDPOINT PATH ...]")
    pairs = list(zip(arguments[::2], arguments[1::2], strict=True))
    react(lambda reactor: ensureDeferred(main(reactor, pairs)))
