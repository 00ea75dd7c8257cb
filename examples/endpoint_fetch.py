"""Fetch a web page served over a dilated wormhole, through a ``dilation:`` endpoint string.

Any Twisted program that takes an endpoint string serves over Dilation without code. Serve a
directory with twistd's own web server; the code it allocates goes to the log and to a file:

    twistd -n web --path ./site --listen 'dilation:subprotocol=http:code-file=code.txt'

and fetch from it, anywhere, with the code (this script; ``clientFromString`` does the rest):

    python examples/endpoint_fetch.py "dilation:subprotocol=http:code=$(cat code.txt)" /index.html

Several ``dilation:`` endpoints naming the same code share one wormhole, in the server (one
``--listen`` per subprotocol, each its own listening port) as in the client (each pair of
arguments here is an endpoint and a path to fetch through it)::

    twistd -n web --path ./site --listen 'dilation:subprotocol=http:code-file=code.txt' \\
        --listen 'dilation:subprotocol=http-admin:code-file=code.txt'
    python examples/endpoint_fetch.py \\
        "dilation:subprotocol=http:code=$(cat code.txt)" /index.html \\
        "dilation:subprotocol=http-admin:code=$(cat code.txt)" /status.txt

Other mailbox servers and relays go in the string too, colons escaped with a backslash:
``dilation:subprotocol=http:code=...:mailbox=ws\\://127.0.0.1\\:4000/v1:relay=tcp\\:127.0.0.1\\:4001``
(docs/endpoints.md lists every key; ``timeout=S`` bounds the wait for the peer, 120 s by
default). Writes each response body to stdout as it came (bytes, so a binary file can be
piped or compared) and a status line per request to stderr; exits 0 if all were 200, 1 if
one was not or the wormhole failed (one line saying why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
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


async def main(reactor: Any, pairs: list[tuple[str, IStreamClientEndpoint]]) -> None:
    from txdilation.endpoints import in_words

    failed = False
    for path, endpoint in pairs:
        agent = Agent.usingEndpointFactory(reactor, Through(endpoint))
        try:
            response = await agent.request(b"GET", b"http://dilated" + path.encode())
            body = await readBody(response)
        except Exception as e:  # the wormhole failed, or timed out: say why, in one line
            raise SystemExit(f"endpoint_fetch.py: GET {path}: {in_words(e)}") from None
        print(f"GET {path}: HTTP {response.code}, {len(body)} bytes", file=sys.stderr)
        sys.stdout.buffer.write(body)
        sys.stdout.buffer.flush()
        failed = failed or response.code != 200
    if failed:
        raise SystemExit(1)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, not the usage text too
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def parse(reactor: Any, argv: list[str]) -> list[tuple[str, IStreamClientEndpoint]]:
    parser = Parser(
        prog="endpoint_fetch.py",
        description=__doc__.splitlines()[0],
        epilog="Each ENDPOINT is a 'dilation:' client endpoint string (docs/endpoints.md); "
        "the last PATH may be left out ('/').",
    )
    parser.add_argument("pairs", nargs="+", metavar="ENDPOINT PATH", help="what to fetch")
    args = parser.parse_args(argv)
    items = args.pairs + (["/"] if len(args.pairs) % 2 else [])
    pairs = list(zip(items[::2], items[1::2], strict=True))
    endpoints = []
    for description, path in pairs:
        if not description.startswith("dilation:"):
            parser.error(f"{description!r} is not a 'dilation:' endpoint string")
        if not path.startswith("/"):
            parser.error(f"{path!r} is not a path (it starts with '/')")
        try:  # "dilation:..." -> txdilation's plugin; a bad string: ValueError naming the key
            endpoints.append((path, clientFromString(reactor, description)))
        except ValueError as e:
            parser.error(str(e))
    return endpoints


if __name__ == "__main__":
    from twisted.internet import reactor

    chosen = parse(reactor, sys.argv[1:])  # parsing starts nothing
    react(lambda reactor: ensureDeferred(main(reactor, chosen)))
