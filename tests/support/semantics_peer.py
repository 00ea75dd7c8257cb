"""
One side of a differential semantics scenario, in its own process.

``python -m tests.support.semantics_peer --impl stock|txdilation --scenario NAME --role a|b
--mailbox URL --appid ID (--allocate | --code CODE)``

Layer: test infrastructure (see ``tests.support.semantics``). The process makes a wormhole
with stock ``wormhole.create`` (txdilation installed first with ``--impl txdilation``, stock
confined to loopback with ``--impl stock``), runs its side of the scenario, closes the
wormhole and reports the trace.

Protocol with the parent (``tests.support.semantics_runner``), JSON lines:
- stdout: ``{"event": "code", "code": ...}`` (side a), ``{"event": "barrier", "name": ...}``
  when the side reaches a barrier, ``{"event": "trace", "events": [...]}`` at the end, and
  ``{"event": "error", ...}`` on a failure of the scenario code itself;
- stdin: ``{"release": NAME}`` once both sides reached barrier NAME; EOF means the other side
  ended (pending barriers are then recorded as broken).
Invariant: the process exits by itself within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 3


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.support.semantics_peer")
    p.add_argument("--impl", choices=("stock", "txdilation"), required=True)
    p.add_argument(
        "--semantics",
        default=None,
        help="txdilation only: the application semantics (stock or twisted)",
    )
    p.add_argument("--scenario", required=True)
    p.add_argument("--role", choices=("a", "b"), required=True)
    p.add_argument("--mailbox", required=True)
    p.add_argument("--appid", required=True)
    code = p.add_mutually_exclusive_group(required=True)
    code.add_argument("--allocate", action="store_true")
    code.add_argument("--code")
    p.add_argument("--timeout", type=float, default=60.0)
    return p


class ErrorLog:
    """Collects the exception class of every failure Twisted's logging reports (unhandled ones
    from a reactor callback or a garbage-collected Deferred, and failures logged by code) except
    those txdilation logs itself (it reports the application's own exceptions that way)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        failure = event.get("log_failure") or event.get("failure")  # new-style or legacy
        if failure is None or str(event.get("log_namespace", "")).startswith("txdilation"):
            return
        self.errors.append(type(failure.value).__name__)


async def run_side(reactor: Any, args: argparse.Namespace, stdin: Any, errors: ErrorLog) -> None:
    import wormhole
    from twisted.internet.defer import Deferred

    from tests.support.semantics import Ctx, Trace
    from tests.support.semantics_scenarios import SCENARIOS

    scenario = SCENARIOS[args.scenario]
    index = 0 if args.role == "a" else 1
    trace = Trace()
    # barrier name -> fires True when the parent releases it, False if stdin ended first
    releases: dict[str, Deferred[bool]] = {}
    ended: list[bool] = []

    def release(name: str) -> Deferred[bool]:
        if name not in releases:
            releases[name] = Deferred()
            if ended:
                releases[name].callback(False)
        return releases[name]

    def read_command(command: dict[str, Any]) -> None:
        if "release" in command:
            d = release(str(command["release"]))
            if not d.called:
                d.callback(True)
        stdin.commands.get().addCallback(read_command)

    def stdin_ended(_: object) -> None:
        ended.append(True)
        for d in releases.values():
            if not d.called:
                d.callback(False)

    stdin.commands.get().addCallback(read_command)
    stdin.finished.addCallback(stdin_ended)

    async def barrier(name: str) -> None:
        emit("barrier", name=name)
        if not await release(name):
            trace.add("barrier broken", name)

    w = wormhole.create(args.appid, args.mailbox, reactor, dilation=scenario.dilation[index])
    if args.allocate:
        w.allocate_code()
        emit("code", code=await w.get_code())
    else:
        w.set_code(args.code)
    ctx = Ctx(reactor, trace, args.role, args.impl, w, barrier)
    await (scenario.a if index == 0 else scenario.b)(ctx)
    if scenario.end_barrier:
        await ctx.barrier("end")
    if not ctx.closed:
        await ctx.close()
    await ctx.sleep(0.3)  # anything the close delivers late
    gc.collect()  # unhandled errors of collected Deferreds are logged now
    await ctx.sleep(0)
    trace.add("errors", sorted(errors.errors))
    emit("trace", events=trace.events)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.impl == "txdilation":
        if args.semantics:
            os.environ["TXDILATION_SEMANTICS"] = args.semantics
        import txdilation

        txdilation.install()

    from twisted.internet import reactor
    from twisted.logger import globalLogPublisher

    from tests.support.peer import StdinWatcher

    errors = ErrorLog()
    globalLogPublisher.addObserver(errors)
    outcome: list[int] = []
    with ExitStack() as stack:
        if args.impl == "stock":
            from tests.support.harness import stock_loopback

            stack.enter_context(stock_loopback())
        stdin = StdinWatcher(reactor)

        def on_timeout() -> None:
            emit("error", error=f"timed out after {args.timeout} s")
            sys.stdout.flush()
            os._exit(EXIT_TIMEOUT)

        def finish(code: int) -> None:
            outcome.append(code)
            reactor.stop()

        def failed(f: Any) -> None:
            emit("error", error=f"{f.type.__name__}: {f.value}")
            traceback.print_exception(f.value, file=sys.stderr)
            finish(EXIT_FAILED)

        def start() -> None:
            from twisted.internet.defer import Deferred

            d = Deferred.fromCoroutine(run_side(reactor, args, stdin, errors))
            d.addCallbacks(lambda _: finish(EXIT_OK), failed)

        reactor.callLater(args.timeout, on_timeout)
        reactor.callWhenRunning(start)
        reactor.run()
    sys.stdout.flush()
    return outcome[0] if outcome else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
