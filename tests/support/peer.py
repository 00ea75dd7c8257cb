"""
A dilation peer in its own process, for interop tests (``python -m tests.support.peer --help``).

Layer: test infrastructure. It drives magic-wormhole through the public stock API only
(``wormhole.create(..., dilation=True)``, ``w.dilate()``, ``when_dilated()``,
``listener_for(name).listen()``, ``connector_for(name).connect()``), so the same scenarios run
against stock (``--impl stock``) and against txdilation installed as the drop-in
(``--impl txdilation``).

Protocol with the parent (see ``tests.support.harness.run_peer_pair``):
- stdout carries one JSON object per line: ``{"event": "code", "code": ...}``,
  ``{"event": "dilated"}``, ``{"event": "status", ...}`` (dilation status changes),
  ``{"event": "result", ...}`` (the scenario's findings), ``{"event": "closed"}``, and on any
  failure ``{"event": "error", "error": ..., "phase": ...}`` followed by a non-zero exit;
- stdin may carry JSON commands; its end (EOF) means "the other peer has finished".
Invariants: every peer exits by itself within ``--timeout`` seconds; it only touches 127.0.0.1
(stock is confined with ``stock_loopback()``, txdilation by the ``TXDILATION_*`` environment),
unless ``--no-loopback`` says it runs in a network namespace of its own
(``tests.support.netns``): then neither is confined, and both discover and advertise that
namespace's addresses, which exist only there.
The scenarios themselves live in ``tests.support.peer_scenarios``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_SETUP = 2
EXIT_TIMEOUT = 3


def emit(event: str, **fields: Any) -> None:
    """Write one JSON event line to stdout and flush it."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _side(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{16}", value):
        raise argparse.ArgumentTypeError("a dilation side is 16 lowercase hex digits")
    return value


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(part) for part in value.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError("sizes are comma-separated byte counts") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def _names(value: str) -> list[str]:
    names = [part for part in value.split(",") if part]
    if not names:
        raise argparse.ArgumentTypeError("give at least one subprotocol name")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (scenario names come from ``tests.support.peer_scenarios``)."""
    from tests.support.peer_scenarios import SCENARIOS

    p = argparse.ArgumentParser(
        prog="python -m tests.support.peer", description=__doc__.split("\n")[1]
    )
    p.add_argument("--mailbox", required=True, help="mailbox server URL (ws://...)")
    p.add_argument("--appid", required=True)
    code = p.add_mutually_exclusive_group(required=True)
    code.add_argument("--allocate", action="store_true", help="allocate a code and report it")
    code.add_argument("--code", help="join with this code")
    p.add_argument("--impl", choices=("stock", "txdilation"), required=True)
    p.add_argument(
        "--relay",
        action="append",
        default=None,
        help="transit relay location, e.g. tcp:127.0.0.1:PORT; repeated: several relays "
        "(txdilation only)",
    )
    p.add_argument("--no-listen", action="store_true", help="dilate(no_listen=True)")
    p.add_argument("--side", type=_side, default=None, help="force the dilation side (16 hex)")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    p.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    p.add_argument("--count", type=int, default=1, help="subchannels to open or expect")
    p.add_argument("--sizes", type=_sizes, default=[1, 1000, 65519, 65520, 1 << 20])
    p.add_argument("--subprotocols", type=_names, default=None, help="names (comma-separated)")
    p.add_argument("--half-close", action="store_true", help="use IHalfCloseableProtocol")
    p.add_argument("--total", type=int, default=5 << 20, help="bulk bytes to send")
    p.add_argument("--chunk", type=int, default=65536, help="bulk write size")
    p.add_argument(
        "--cut-interval", type=float, default=0.0, help="bulk: abort the L2 link every N seconds"
    )
    p.add_argument("--linger", type=float, default=0.0, help="bulk-recv: wait before closing")
    p.add_argument(
        "--cut-at-close",
        action="store_true",
        help="bulk-recv: cut the link as the sender's CLOSE arrives (our answer is lost with it),"
        " then close the wormhole at once",
    )
    p.add_argument("--read-rate", type=float, default=0.0, help="bulk-recv: read <= N bytes/s")
    p.add_argument("--read-stall", type=float, default=0.0, help="bulk-recv: first read after N s")
    p.add_argument("--seed", default="txdilation", help="seed for the generated payloads")
    # fault-injection scenarios (tests/test_durability.py)
    p.add_argument("--ping-interval", type=float, default=None, help="dilate(ping_interval=)")
    p.add_argument("--duration", type=float, default=5.0, help="echo-steady: seconds to run")
    p.add_argument("--listen-port", type=int, default=None, help="txdilation: fixed listen port")
    p.add_argument("--hint-port", type=int, default=None, help="txdilation: advertised port")
    p.add_argument(
        "--punch", choices=("on", "off"), default=None, help="txdilation: TXDILATION_PUNCH"
    )
    p.add_argument(
        "--peer-timeout", type=float, default=None, help="txdilation: TXDILATION_PEER_TIMEOUT"
    )
    p.add_argument("--events", default=None, help="txdilation: TXDILATION_EVENTS (telemetry file)")
    p.add_argument(
        "--max-unauthenticated",
        type=int,
        default=None,
        help="txdilation: TXDILATION_MAX_UNAUTHENTICATED (listener's cap)",
    )
    p.add_argument(
        "--semantics",
        default=None,
        help="txdilation: TXDILATION_SEMANTICS, what the scenario sees (stock or twisted)",
    )
    # recovery measurements (tests/support/peer_stream.py, in network namespaces)
    p.add_argument(
        "--record-interval", type=float, default=0.01, help="stream-send: seconds between records"
    )
    p.add_argument(
        "--no-loopback",
        action="store_true",
        help="in a network namespace of its own: do not confine either implementation to "
        "127.0.0.1 (the TXDILATION_LISTEN_INTERFACE/TXDILATION_HINT_ADDRESSES variables are "
        "dropped)",
    )
    return p


_TXDILATION_SETTINGS = {
    "listen_port": "TXDILATION_LISTEN_PORT",
    "hint_port": "TXDILATION_HINT_PORT",
    "punch": "TXDILATION_PUNCH",
    "peer_timeout": "TXDILATION_PEER_TIMEOUT",
    "events": "TXDILATION_EVENTS",
    "max_unauthenticated": "TXDILATION_MAX_UNAUTHENTICATED",
    "semantics": "TXDILATION_SEMANTICS",
}


def _apply_txdilation_settings(args: argparse.Namespace) -> None:
    """Turn the txdilation-only options into the ``TXDILATION_*`` environment it reads."""
    for name, variable in _TXDILATION_SETTINGS.items():
        value = getattr(args, name)
        if value is None:
            continue
        if args.impl != "txdilation":
            option = "--" + name.replace("_", "-")
            raise SystemExit(_setup_error(f"{option} only applies to --impl txdilation"))
        os.environ[variable] = str(value)


class StdinWatcher:
    """
    Reads JSON command lines from stdin in a daemon thread and hands them to the reactor.

    ``commands`` is a ``DeferredQueue`` of dicts; ``finished`` fires (with ``None``) at EOF.
    """

    def __init__(self, reactor: Any) -> None:
        from twisted.internet.defer import Deferred, DeferredQueue

        self._reactor = reactor
        self.commands: DeferredQueue[dict[str, Any]] = DeferredQueue()
        self.finished: Deferred[None] = Deferred()
        threading.Thread(target=self._read, name="stdin", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            try:
                command = json.loads(line)
            except ValueError:
                command = {"command": "garbage", "line": line}
            self._reactor.callFromThread(self.commands.put, command)
        self._reactor.callFromThread(self._eof)

    def _eof(self) -> None:
        if not self.finished.called:
            self.finished.callback(None)


def _install_txdilation() -> None:
    try:
        import txdilation
    except ImportError as e:
        message = f"--impl txdilation: cannot import txdilation: {e}"
        raise SystemExit(_setup_error(message)) from e
    install: Callable[[], object] | None = getattr(txdilation, "install", None)
    if install is None:
        raise SystemExit(
            _setup_error("--impl txdilation: txdilation.install() does not exist (yet)")
        )
    install()


def _setup_error(message: str) -> int:
    emit("error", error=message, phase="setup")
    print(message, file=sys.stderr)
    return EXIT_SETUP


def _force_side(stack: ExitStack, side: str) -> None:
    from unittest import mock

    import wormhole._dilation.manager as manager

    if not hasattr(manager, "make_side"):
        raise SystemExit(_setup_error(f"--side: {manager.__name__} has no make_side()"))

    def make_side() -> str:
        emit("side", side=side)
        return side

    stack.enter_context(mock.patch.object(manager, "make_side", make_side))


def _unacknowledged(peer: Any) -> int | None:
    """(txdilation) how many records the peer has not acknowledged yet (None for stock)."""
    manager = getattr(getattr(getattr(peer.wormhole, "_boss", None), "_D", None), "_manager", None)
    count = getattr(getattr(manager, "multiplexer", None), "unacknowledged_records", None)
    return count if isinstance(count, int) else None


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run one peer: connect, dilate, run the scenario, close.

    :param argv: arguments (default ``sys.argv[1:]``).
    :returns: the process exit status (0 ok, 1 failed, 2 bad setup, 3 timed out).
    """
    args = build_parser().parse_args(argv)
    log_path = os.environ.get("TXDILATION_PEER_LOG")
    if log_path:  # debugging aid: the peer's Twisted log, one file per peer process
        from twisted.logger import globalLogBeginner, textFileLogObserver

        log_file = open(f"{log_path}.{os.getpid()}", "a")  # noqa: SIM115 (lives as long as the process)
        globalLogBeginner.beginLoggingTo([textFileLogObserver(log_file)], redirectStandardIO=False)
    if args.no_loopback:
        for variable in ("TXDILATION_LISTEN_INTERFACE", "TXDILATION_HINT_ADDRESSES"):
            os.environ.pop(variable, None)
    _apply_txdilation_settings(args)
    if args.impl == "txdilation":
        _install_txdilation()  # before anything imports wormhole

    from twisted.internet import reactor

    from tests.support.peer_scenarios import Peer

    outcome: list[int] = []
    with ExitStack() as stack:
        if args.impl == "stock" and not args.no_loopback:
            from tests.support.harness import stock_loopback

            stack.enter_context(stock_loopback())
        if args.side is not None:
            _force_side(stack, args.side)
        peer = Peer(reactor, args, emit, StdinWatcher(reactor))

        def on_timeout() -> None:
            emit(
                "error",
                error=f"timed out after {args.timeout} s",
                phase=peer.phase,
                unacknowledged=_unacknowledged(peer),
            )
            print(f"peer timed out in phase {peer.phase!r}", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_TIMEOUT)

        def finish(code: int) -> None:
            outcome.append(code)
            reactor.stop()

        def failed(f: Any) -> None:
            emit("error", error=f"{f.type.__name__}: {f.value}", phase=peer.phase)
            traceback.print_exception(f.value, file=sys.stderr)
            finish(EXIT_FAILED)

        def start() -> None:
            d = peer.run()
            d.addCallbacks(lambda _: finish(EXIT_OK), failed)

        reactor.callLater(args.timeout, on_timeout)
        reactor.callWhenRunning(start)
        reactor.run()
    sys.stdout.flush()
    return outcome[0] if outcome else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
