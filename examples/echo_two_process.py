"""An echo service over a dilated wormhole between two processes (or two machines).

    # one side: allocate a code, print it, serve "echo" until the peer leaves
    python examples/echo_two_process.py serve --mailbox ws://relay.magic-wormhole.io:4000/v1
    # -> wormhole code: 7-guitarist-revenge

    # the other side: the same mailbox and the code; each word is echoed
    python examples/echo_two_process.py connect 7-guitarist-revenge \\
        --mailbox ws://relay.magic-wormhole.io:4000/v1 hello world
    # -> echo: hello
    # -> echo: world

Both sides print the verifier: the same value on both means nobody sat in the middle. With a
transit relay (``--relay tcp:transit.magic-wormhole.io:4001`` on both sides) the peers also
reach each other when no direct connection works. ``serve`` exits 0 once the peer closed its
wormhole; ``connect`` exits 0 once every word came back.
"""

from __future__ import annotations

from typing import Any

import wormhole
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.task import react

import txdilation
from echo_protocol import EchoClient, OneLineParser, in_one_line, server_factory

# from here on, every wormhole.create(..., dilation=True) dilates through txdilation (stock
# magic-wormhole's API, txdilation's implementation; install() may come before or after
# `import wormhole`)
txdilation.install()

APPID = "txdilation.example/echo"
PUBLIC_MAILBOX = "ws://relay.magic-wormhole.io:4000/v1"


async def serve(reactor: Any, mailbox: str, relay: str | None) -> None:
    peer_left: Deferred[None] = Deferred()

    def on_status(status: Any) -> None:  # w.dilate(on_status_update=): stock's DilationStatus
        if type(status.peer_connection).__name__ == "StoppedPeer" and not peer_left.called:
            peer_left.callback(None)

    w = wormhole.create(APPID, mailbox, reactor, dilation=True)
    dilated = w.dilate(transit_relay_location=relay, on_status_update=on_status)
    w.allocate_code()
    print(f"wormhole code: {await w.get_code()}", flush=True)
    print(f"verifier: {(await w.get_verifier()).hex()}", flush=True)
    await dilated.listener_for("echo").listen(server_factory())
    print("dilated; serving echo until the peer leaves", flush=True)
    await peer_left
    await w.close()
    print("the peer left", flush=True)


async def connect(
    reactor: Any, mailbox: str, relay: str | None, code: str, words: list[str]
) -> None:
    w = wormhole.create(APPID, mailbox, reactor, dilation=True)
    dilated = w.dilate(transit_relay_location=relay)
    w.set_code(code)
    print(f"verifier: {(await w.get_verifier()).hex()}", flush=True)
    messages = [word.encode() for word in words] or [b"hello"]
    try:
        client = await connectProtocol(dilated.connector_for("echo"), EchoClient(messages))
        for reply in await client.done:
            print(reply.decode(), flush=True)
    finally:
        await w.close()  # the server hears that we left


def run(reactor: Any) -> Any:
    parser = OneLineParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [--mailbox URL] [--relay HINT] {serve | connect CODE [WORD ...]}",
    )
    parser.add_argument("--mailbox", default=PUBLIC_MAILBOX, help="mailbox server URL")
    parser.add_argument("--relay", help="transit relay, tcp:HOST:PORT")
    parser.add_argument("role", choices=("serve", "connect"), help="serve echo, or connect to it")
    parser.add_argument("code_and_words", nargs="*", metavar="CODE WORD", help="for connect")
    args = parser.parse_intermixed_args()  # options before or after the words
    if args.role == "serve":
        if args.code_and_words:
            parser.error(f"serve takes no code or words: {' '.join(args.code_and_words)}")
        return ensureDeferred(serve(reactor, args.mailbox, args.relay))
    if not args.code_and_words:
        parser.error("connect needs the code the serving side printed")
    code, *words = args.code_and_words
    return ensureDeferred(connect(reactor, args.mailbox, args.relay, code, words))


if __name__ == "__main__":
    react(lambda reactor: run(reactor).addErrback(in_one_line("echo_two_process.py")))
