"""
Runs one differential semantics scenario: two ``tests.support.semantics_peer`` processes.

Layer: test infrastructure. :func:`run_scenario` starts side a (which allocates the code),
then side b with that code, releases each barrier once both sides reached it, and returns
both traces. Both processes are always ended (killed at the timeout) before it returns.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import DeferredList

from tests.support.harness import REPO_ROOT, PeerFailure, PeerResult, _PeerProcess, peer_environment
from tests.support.semantics_scenarios import SCENARIOS

APPID = "lothar.com/txdilation/semantics"


@dataclass(frozen=True)
class Traces:
    """The two sides' traces of one run."""

    a: list[list[Any]]
    b: list[list[Any]]


def _spawn(reactor: Any, name: str, argv: list[str], on_event: Any) -> _PeerProcess:
    proto = _PeerProcess(PeerResult(name=name), on_event)
    args = [sys.executable, "-m", "tests.support.semantics_peer", *argv]
    reactor.spawnProcess(proto, sys.executable, args, env=peer_environment(), path=str(REPO_ROOT))
    return proto


async def run_scenario(
    reactor: Any,
    mailbox_url: str,
    scenario: str,
    *,
    impl_a: str,
    impl_b: str,
    semantics: str | None = None,
) -> Traces:
    """Run ``scenario`` with side a on ``impl_a`` and side b on ``impl_b``.

    :param semantics: ``--semantics`` for the txdilation sides (default: the installed default).
    :raises PeerFailure: if a side failed, timed out, or reported no trace.
    """
    timeout = SCENARIOS[scenario].timeout
    procs: dict[str, _PeerProcess] = {}
    reached: dict[str, set[str]] = {}

    def argv(role: str, impl: str) -> list[str]:
        args = [
            "--impl", impl, "--scenario", scenario, "--role", role,
            "--mailbox", mailbox_url, "--appid", APPID, "--timeout", str(timeout - 5),
        ]  # fmt: skip
        if semantics is not None and impl == "txdilation":
            args += ["--semantics", semantics]
        return args

    def on_event(proc: _PeerProcess, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "code" and "b" not in procs:
            b_argv = [*argv("b", impl_b), "--code", str(event["code"])]
            procs["b"] = _spawn(reactor, "b", b_argv, on_event)
            procs["b"].ended.addCallback(lambda _: procs["a"].close_stdin())
        elif kind == "barrier":
            name = str(event["name"])
            reached.setdefault(name, set()).add(proc.result.name)
            if len(reached[name]) == 2:
                line = json.dumps({"release": name}).encode() + b"\n"
                for other in procs.values():
                    if other.running and other.transport is not None:
                        other.transport.write(line)

    procs["a"] = _spawn(reactor, "a", [*argv("a", impl_a), "--allocate"], on_event)
    procs["a"].ended.addCallback(lambda _: "b" in procs and procs["b"].close_stdin())
    timer = reactor.callLater(timeout, lambda: [p.kill() for p in procs.values()])
    try:
        await procs["a"].ended
        if "b" in procs:
            await procs["b"].ended
    finally:
        if timer.active():
            timer.cancel()
        for proc in procs.values():
            proc.kill()
        await DeferredList([p.ended for p in procs.values()])

    results = {name: proc.result for name, proc in procs.items()}
    traces = {}
    problems = []
    for name in ("a", "b"):
        result = results.get(name)
        trace = result.event("trace") if result is not None else None
        if result is None or trace is None or result.exit_code != 0:
            problems.append(f"side {name} ({impl_a if name == 'a' else impl_b}) gave no trace")
        else:
            traces[name] = trace["events"]
    if problems:
        tails = "\n".join(r.tail() for r in results.values())
        raise PeerFailure(f"{scenario}: " + "; ".join(problems) + "\n" + tails)
    return Traces(traces["a"], traces["b"])
