"""A ``twistd -n dilation`` session's log, as journald would keep it from stdout: two real
twistd processes through the real mailbox server and transit relay on 127.0.0.1, the link of
one cut (SIGUSR2) and re-established, then a SIGTERM stop (the other side ends peer-closed).

Side A logs with twistd's defaults (text lines on stdout, through txdilation's level filter),
side B with ``--logger txdilation.logs.journal_logger --log-level debug`` (syslog priority
prefixes, telemetry lines at debug with their fields). Both also print ``--status -`` JSON
lines on the same stdout, which the test follows to drive the scenario and then sets aside."""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.trial.unittest import TestCase

from tests.support.harness import LOOPBACK, RealServersMixin
from txdilation.session.child import SessionProcess, spawn_session, twistd_command

APPID = "txdilation.test/session-log"


class TwistdLogTests(RealServersMixin, TestCase):
    """What an operator reads in the journal of a session with a reconnect."""

    timeout = 90

    def twistd(self, name: str, twistd_options: list[str], *args: str) -> SessionProcess:
        argv = [
            *twistd_command(["--pidfile", "", *twistd_options]),
            "--mailbox", self.mailbox.url, "--appid", APPID, "--relay", self.transit_relay.hint,
            "--status", "-", *args,
        ]  # fmt: skip
        process = spawn_session(self.reactor, name, argv, path=self.mktemp_dir())
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    def mktemp_dir(self) -> str:
        import os

        path = os.path.abspath(self.mktemp())
        os.makedirs(path)
        return path

    async def within(self, d: Deferred[Any], what: str, *processes: SessionProcess) -> Any:
        timer = self.reactor.callLater(30, d.cancel)
        try:
            return await d
        except Exception:
            self.fail(f"{what}:\n" + "\n".join(p.tail() for p in processes))
        finally:
            if timer.active():
                timer.cancel()

    async def test_log_of_a_session_with_a_reconnect(self) -> None:
        """Each side's log has, one readable line each: the code, the verifier (the same on
        both sides), 'dilated' with the generation and path, the loss ('connection lost,
        reconnecting') and 'reconnected: generation 2, ... N ms after the loss', the stop and
        the close with its reason; at the default level no debug line (no telemetry, no
        Twisted factory or port chatter); with --log-level debug the telemetry records show
        with their fields; the journal logger prefixes every line with its priority."""
        a = self.twistd("A", [], "--allocate-code", "--listen", f"web=tcp:0:interface={LOOPBACK}")
        code = (await self.within(a.next_event("code"), "A's code", a))["code"]
        b = self.twistd(
            "B",
            ["--logger", "txdilation.logs.journal_logger"],
            "--code", code, "--connect", f"web=tcp:{LOOPBACK}:9", "--log-level", "debug",
        )  # fmt: skip
        dilated = gatherResults([a.next_event("dilated"), b.next_event("dilated")])
        await self.within(dilated, "both dilated", a, b)
        selected = await self.within(
            Deferred.fromCoroutine(a.cut_link(self.reactor)), "A reconnected", a, b
        )
        self.assertEqual(selected["generation"], 2)
        self.assertEqual(
            await self.within(Deferred.fromCoroutine(a.terminate(self.reactor)), "A's stop", a), 0
        )
        self.assertEqual(await self.within(b.ended, "B's end", b), 0)

        a_log, b_log = a.other_output, b.other_output
        verifier = a.of_kind("peer-connected")[0]["verifier"]
        # A: twistd's text lines, through txdilation's filter at info
        a_text = "\n".join(a_log)
        for expected in (
            rf"\[txdilation\.session#info\] wormhole code: {code}$",
            rf"\[txdilation\.session#info\] peer connected; verifier {verifier}$",
            r"\[txdilation\.session#info\] dilated: generation 1, direct connection (->|<-)tcp:",
            r"\[txdilation\.session#info\] generation 1: link cut \(debug signal SIGUSR2\)$",
            r"\[txdilation\.session#info\] generation 1: connection lost, reconnecting",
            r"\[txdilation\.session#info\] reconnected: generation 2, (direct|relay) connection "
            r"\S+, \d+ ms after the loss$",
            r"\[txdilation\.session#info\] stopping \(SIGTERM\)$",
            r"\[txdilation\.session#info\] session closed \(stopped, mood happy\)$",
        ):
            self.assertRegex(a_text, re.compile(expected, re.M))
        for line in a_log:
            self.assertNotIn("#debug]", line)
            self.assertNotIn("telemetry", line)
            self.assertNotIn("Starting factory", line)
            self.assertNotRegex(line, r"starting on \d+|Port \d+ Closed")
            self.assertNotIn("Traceback", line)
        # B: the journal logger, at debug
        self.assertTrue(all(re.match(r"<[2-7]>\[", line) for line in b_log), b_log)
        b_text = "\n".join(b_log)
        for expected in (
            rf"^<6>\[txdilation\.session\] wormhole code: {code}$",
            rf"^<6>\[txdilation\.session\] peer connected; verifier {verifier}$",
            r"^<6>\[txdilation\.session\] dilated: generation 1, direct connection ",
            r"^<6>\[txdilation\.session\] reconnected: generation 2, .* ms after the loss$",
            r"^<6>\[txdilation\.session\] stopping \(peer-closed\)$",
            r"^<6>\[txdilation\.session\] session closed \(peer-closed, mood happy\)$",
            r"^<7>\[txdilation\.telemetry\] telemetry connection_selected role=\w+ "
            r"generation=1 .*hint_type=",
        ):
            self.assertRegex(b_text, re.compile(expected, re.M))
