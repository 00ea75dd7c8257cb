"""A real mailbox server on 127.0.0.1 in its own process: ``python -m benchmarks.mailbox``.

Layer: benchmark infrastructure. Prints one JSON line ``{"url": "ws://127.0.0.1:PORT/v1"}``
and serves (channel state in memory) until its stdin reaches EOF; then stops and exits.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any


def main() -> int:
    """Serve until stdin closes; returns the exit status."""
    from twisted.internet import reactor as _reactor
    from twisted.internet.defer import Deferred

    from txdilation.testing.servers import start_mailbox_server

    reactor: Any = _reactor

    async def serve() -> None:
        server = await start_mailbox_server(reactor)
        sys.stdout.write(json.dumps({"url": server.url}) + "\n")
        sys.stdout.flush()
        eof: Deferred[None] = Deferred()

        def wait() -> None:
            sys.stdin.read()
            reactor.callFromThread(eof.callback, None)

        threading.Thread(target=wait, name="stdin", daemon=True).start()
        await eof
        await server.stop()

    def start() -> None:
        d = Deferred.fromCoroutine(serve())
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(start)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
