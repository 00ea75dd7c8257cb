"""Two dilated wormholes in one process, an echo service between them over a subchannel.

    python examples/echo_one_process.py                      # local servers (txdilation[demo])
    python examples/echo_one_process.py --mailbox ws://relay.magic-wormhole.io:4000/v1 \\
        --relay tcp:transit.magic-wormhole.io:4001 hello world

The whole API an application needs, in order: install txdilation, create two wormholes with
``dilation=True``, exchange a code (Alice allocates it, Bob is told it: ``allocate_code`` /
``get_code`` / ``set_code``), compare verifiers, dilate both, listen for a subprotocol on one
side and connect to it from the other, then close both wormholes. Without ``--mailbox`` it
starts a real mailbox server and transit relay on 127.0.0.1 in this process
(``txdilation.testing.servers``, from ``pip install -e '.[demo]'`` in a checkout).
"""

from __future__ import annotations

from typing import Any

import wormhole
from twisted.internet.defer import ensureDeferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.task import react

import txdilation
from echo_protocol import EchoClient, OneLineParser, in_one_line, server_factory

# from here on, every wormhole.create(..., dilation=True) dilates through txdilation (stock
# magic-wormhole's API, txdilation's implementation; install() may come before or after
# `import wormhole`)
txdilation.install()

APPID = "txdilation.example/echo"  # both sides must use the same application id


async def main(reactor: Any, mailbox: str | None, relay: str | None, words: list[str]) -> None:
    servers: list[Any] = []
    if mailbox is None:  # no server given: run the real ones here, on 127.0.0.1
        from txdilation.testing.servers import start_mailbox_server, start_transit_relay

        mailbox_server = await start_mailbox_server(reactor)  # .url: the ws:// URL
        relay_server = await start_transit_relay(reactor)  # .hint: tcp:127.0.0.1:PORT
        servers = [mailbox_server, relay_server]  # each has .stop()
        mailbox, relay = mailbox_server.url, relay_server.hint
        print(f"local mailbox server {mailbox}, transit relay {relay}")
    alice = wormhole.create(APPID, mailbox, reactor, dilation=True)
    bob = wormhole.create(APPID, mailbox, reactor, dilation=True)
    wormholes = [alice, bob]
    try:
        # the code exchange: Alice allocates a code; Bob gets it from her (out of band:
        # here a variable, in real life a person reading it out) and sets it
        alice.allocate_code()
        code = await alice.get_code()
        print(f"wormhole code: {code}")
        bob.set_code(code)
        # both now run the key exchange; equal verifiers rule out a man in the middle
        alice_verifier, bob_verifier = await alice.get_verifier(), await bob.get_verifier()
        print(f"verifiers match: {alice_verifier == bob_verifier}")

        # dilate both (same arguments as stock magic-wormhole's w.dilate())
        alice_dilated = alice.dilate(transit_relay_location=relay)
        bob_dilated = bob.dilate(transit_relay_location=relay)
        await alice_dilated.when_dilated()
        print("dilated")

        # Bob serves the subprotocol "echo"; Alice opens a subchannel to it
        await bob_dilated.listener_for("echo").listen(server_factory())
        messages = [w.encode() for w in words] or [b"hello", b"dilated", b"world"]
        client = await connectProtocol(alice_dilated.connector_for("echo"), EchoClient(messages))
        for reply in await client.done:
            print(f"alice got: {reply.decode()}")
        for w in wormholes:
            await w.close()  # a wormhole that failed raises why here
    finally:
        for w in wormholes:  # closing twice is harmless; after a failure, that failure says why
            await w.close().addErrback(lambda _: None)
        for server in servers:
            await server.stop()


def run(reactor: Any) -> Any:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mailbox", help="mailbox server URL (default: start one here)")
    parser.add_argument("--relay", help="transit relay, tcp:HOST:PORT")
    parser.add_argument("words", nargs="*", help="messages to echo")
    args = parser.parse_args()
    return ensureDeferred(main(reactor, args.mailbox, args.relay, args.words))


if __name__ == "__main__":
    react(lambda reactor: run(reactor).addErrback(in_one_line("echo_one_process.py")))
