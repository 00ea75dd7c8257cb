"""Command-line conventions of every command (``txdilation``, ``txdilation run``, ``txdilation
demo``, ``python -m txdilation``, ``twistd dilation``) and the settings they take.

- ``--version`` prints txdilation's, magic-wormhole's, Twisted's and Python's versions, exit 0;
- a usage error is one line on stderr, ``COMMAND: error: ...; see 'COMMAND --help'``, exit 2;
- the mailbox URL is checked before anything starts;
- every library setting is an option and a TOML key, reaching the library as its
  ``TXDILATION_*`` variable (variables set outside still count when the setting is not given);
- ``--no-listen`` without ``--relay`` is a ``warning`` event.

Most run in this process (``cli.main`` with captured streams); one subprocess each shows that
``python -m txdilation`` and ``twistd dilation --version`` work as installed commands."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from importlib import metadata
from typing import Any

from twisted.trial.unittest import SynchronousTestCase, TestCase

import twisted
import txdilation
from tests.support.harness import REPO_ROOT, RealServersMixin
from txdilation import cli, logs
from txdilation.reporting.status_events import EventLog, StatusWriter
from txdilation.session.command_line import SessionOptions
from txdilation.session.config import (
    DILATION_SETTINGS,
    ConfigError,
    build_config,
    check_mailbox_url,
    load_toml,
    merge,
)
from txdilation.session.process import prepare
from txdilation.values import parse_size


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``txdilation ARGV`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
    return code, out.getvalue(), err.getvalue()


def expected_versions() -> list[str]:
    import platform

    return [
        f"txdilation {txdilation.__version__}",
        f"magic-wormhole {metadata.version('magic-wormhole')}",
        f"Twisted {twisted.__version__}",
        f"Python {platform.python_version()}",
    ]


class VersionTests(SynchronousTestCase):
    """--version everywhere."""

    def test_every_command(self) -> None:
        """txdilation, txdilation run and txdilation demo print the four versions, one per
        line, and exit 0."""
        for argv in (
            ["--version"], ["run", "--version"], ["demo", "--version"], ["-V"], ["run", "-V"],
            ["demo", "-V"],
        ):  # fmt: skip
            with self.subTest(argv=argv):
                code, out, err = run_cli(*argv)
                self.assertEqual((code, err), (0, ""))
                self.assertEqual(out.splitlines(), expected_versions())

    def test_installed_commands(self) -> None:
        """``python -m txdilation --version`` and ``twistd dilation --version`` (the plugin's
        options) print the same versions."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        twistd = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
        for argv in (
            [sys.executable, "-m", "txdilation", "--version"],
            [*twistd, "dilation", "--version"],
        ):
            with self.subTest(argv=argv[-2:]):
                done = subprocess.run(
                    argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60
                )
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(done.stdout.splitlines(), expected_versions())


class HelpTests(SynchronousTestCase):
    """-h works wherever --help does."""

    def test_short_help(self) -> None:
        """``txdilation -h``, ``txdilation run -h`` and ``txdilation demo -h`` print the help
        (the options of the command) and exit 0."""
        for argv, words in (
            (["-h"], "{run,demo,pairing,exec,enable,disable,which}"),
            (["run", "-h"], "--drain-timeout"),
            (["demo", "-h"], "--mib"),
        ):
            with self.subTest(argv=argv):
                code, out, err = run_cli(*argv)
                self.assertEqual((code, err), (0, ""))
                self.assertIn(words, out)


class UsageErrorTests(SynchronousTestCase):
    """One line, exit 2, pointing at --help."""

    def test_one_line(self) -> None:
        """Missing or unknown commands, bad values and bad options: one line on stderr naming
        the problem and ending with the command's --help; nothing on stdout; exit 2."""
        c = ("run", "--code", "1-a")
        cases = {  # argv: what the one line says
            (): "required",
            ("serve",): "invalid choice: 'serve'",
            ("demo", "--mib", "x"): "--mib: expected a positive whole",
            ("demo", "--cuts", "-1"): "--cuts: expected a whole number",
            ("demo", "--timeout", "-1"): "--timeout: expected a positive number of seconds",
            ("run", "--bogus"): "option --bogus not recognized",
            ("run",): "give a wormhole code (--code)",
            (*c, "--ping-interval", "soon"): "--ping-interval: expected a number of seconds",
            (*c, "--mailbox", "http://relay.example/v1"): "mailbox 'http://relay.example/v1' has 'http://'",
            (*c, "--listen", "web=systemd:domain=INET:index=0"): "systemd passed no such socket",
            (*c, "--max-record-size", "big"): "max-record-size: expected a number of bytes",
            (*c, "--listen", "web=tcp:0", "--listen", "web=tcp:1"):
                "--listen web given twice (tcp:0 and tcp:1): one endpoint per name",
            (*c, "hello"): "unexpected argument 'hello' (every setting is an option",
            (*c, "--status", "/nonexistent/dir/s.jsonl"):
                "--status /nonexistent/dir/s.jsonl: the directory /nonexistent/dir does not exist",
            (*c, "--events", "/nonexistent/dir/e.jsonl"):
                "--events /nonexistent/dir/e.jsonl: the directory /nonexistent/dir does not exist",
        }  # fmt: skip
        for argv, words in cases.items():
            command = "txdilation " + argv[0] if argv[:1] in (("run",), ("demo",)) else "txdilation"
            with self.subTest(argv=argv):
                code, out, err = run_cli(*argv)
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertTrue(err.startswith(f"{command}: error: "), err)
                self.assertIn(words, err)
                self.assertTrue(err.rstrip().endswith(f"see '{command} --help'"), err)

    def test_bad_log_level_variable(self) -> None:
        """A TXDILATION_LOG_LEVEL naming no level is a usage error (--log-level would win)."""
        self.patch(os, "environ", {**os.environ, "TXDILATION_LOG_LEVEL": "loud"})
        code, _out, err = run_cli("run", "--code", "1-a")
        self.assertEqual(code, 2)
        self.assertIn("TXDILATION_LOG_LEVEL", err)
        options = SessionOptions()
        options.parseOptions(["--code", "1-a", "--log-level", "debug"])  # type: ignore[no-untyped-call]

    def test_bad_library_variable(self) -> None:
        """A TXDILATION_* variable the library would refuse when the session dilates is a usage
        error before anything starts (it was a fatal 'unexpected' error, after the mailbox);
        TXDILATION_SEMANTICS is not one: the session chooses its own semantics."""
        self.patch(os, "environ", {**os.environ, "TXDILATION_PEER_TIMEOUT": "abc"})
        code, _out, err = run_cli("run", "--code", "1-a")
        self.assertEqual(code, 2)
        self.assertIn("TXDILATION_PEER_TIMEOUT must be a number of seconds, not 'abc'", err)
        environ = {k: v for k, v in os.environ.items() if k != "TXDILATION_PEER_TIMEOUT"}
        self.patch(os, "environ", {**environ, "TXDILATION_SEMANTICS": "weird"})
        SessionOptions().parseOptions(["--code", "1-a"])  # type: ignore[no-untyped-call]


class MailboxUrlTests(SynchronousTestCase):
    """The mailbox URL is checked up front."""

    def test_urls(self) -> None:
        """ws:// and wss:// URLs with a host pass; other schemes, no host, a bad port fail
        with an example of a good URL."""
        for good in ("ws://relay.magic-wormhole.io:4000/v1", "wss://mailbox.example/v1"):
            check_mailbox_url(good)
        for bad, words in (
            ("http://relay.example:4000/v1", "'http://'"),
            ("relay.example:4000", "starts with ws://"),
            ("ws:///v1", "no host"),
            ("ws://host:99999/v1", "not a URL"),
        ):
            with self.subTest(url=bad):
                e = self.assertRaises(ConfigError, check_mailbox_url, bad)
                self.assertIn(words, str(e))
                self.assertIn("e.g. ws://", str(e))

    def test_default_from_the_environment(self) -> None:
        """TXDILATION_MAILBOX names the mailbox server when neither the command line nor the
        file does (sessions and dilation: strings alike); a given one wins; it is checked too."""
        from twisted.internet.endpoints import serverFromString
        from twisted.internet.testing import MemoryReactor

        self.patch(os, "environ", {**os.environ, "TXDILATION_MAILBOX": "ws://own.example:4000/v1"})
        options = SessionOptions()
        options.parseOptions(["--code", "1-a"])
        self.assertEqual(options.config.mailbox, "ws://own.example:4000/v1")
        options = SessionOptions()
        options.parseOptions(["--code", "1-a", "--mailbox", "ws://given.example/v1"])
        self.assertEqual(options.config.mailbox, "ws://given.example/v1")
        endpoint = serverFromString(MemoryReactor(), "dilation:subprotocol=x")
        self.assertEqual(endpoint.settings.mailbox, "ws://own.example:4000/v1")
        os.environ["TXDILATION_MAILBOX"] = "http://wrong.example"
        code, _, err = run_cli("run", "--code", "1-a")
        self.assertEqual(code, 2)
        self.assertIn("mailbox 'http://wrong.example' has 'http://'", err)


class SettingsTests(SynchronousTestCase):
    """Every library setting as an option and a TOML key."""

    OPTIONS = {
        "listen-interface": ("127.0.0.1", "127.0.0.1"),
        "listen-port": ("4001", 4001),
        "hint-addresses": ("192.0.2.7, 198.51.100.1", ("192.0.2.7", "198.51.100.1")),
        "hint-port": ("40001", 40001),
        "punch": ("off", False),
        "port-mapping": ("off", False),
        "handshake-timeout": ("12.5", 12.5),
        "peer-timeout": ("0", None),
        "max-unacked-bytes": ("8MiB", 8 * 2**20),
        "max-buffered-inbound-bytes": ("2M", 2_000_000),
        "max-pending-open-bytes": ("65536", 65536),
        "max-record-size": ("1GiB", 2**30),
        "traffic-interval": ("30", 30.0),
    }

    def test_options_reach_the_settings(self) -> None:
        """Each option becomes its library setting (sizes with units, lists split), laid over
        the settings read from the environment."""
        from txdilation.session.library import library_settings
        from txdilation.settings import Settings

        self.assertEqual(set(self.OPTIONS), {d.key for d in DILATION_SETTINGS})
        argv = ["--code", "1-a"]
        for key, (given, _) in self.OPTIONS.items():
            argv += [f"--{key}", given]
        options = SessionOptions()
        options.parseOptions(argv)  # type: ignore[no-untyped-call]
        assert options.config is not None
        base = Settings.from_environ({"TXDILATION_HINT_PORT": "1", "TXDILATION_EVENTS": "e"})
        settings = library_settings(options.config, base)
        groups = (settings.network, settings.limits, settings.policy, settings.telemetry)
        for key, (_, value) in self.OPTIONS.items():
            field = key.replace("-", "_")
            with self.subTest(key=key):
                (group,) = [g for g in groups if hasattr(g, field)]
                self.assertEqual(getattr(group, field), value)
        self.assertEqual(settings.telemetry.events_path, "e")  # not given: the variable's
        self.assertEqual(settings.semantics.name, "twisted")  # the session's own

    def test_toml_keys_and_precedence(self) -> None:
        """The same keys in TOML (numbers as numbers, addresses as a list); the command line
        wins over the file; a setting given nowhere is left as the environment has it."""
        from txdilation.session.library import library_settings
        from txdilation.settings import Settings

        path = self.mktemp()
        with open(path, "w") as f:
            f.write(
                'code = "1-a"\nlog-level = "debug"\nlisten-port = 4001\n'
                'hint-addresses = ["192.0.2.7", "198.51.100.1"]\nmax-unacked-bytes = 1048576\n'
                "handshake-timeout = 5\npunch = false\n"
            )
        config = build_config(merge(load_toml(path), {"handshake-timeout": "7"}))
        self.assertEqual(config.log_level, "debug")
        base = Settings.from_environ({"TXDILATION_MAX_RECORD_SIZE": "1000"})
        settings = library_settings(config, base)
        self.assertEqual(settings.network.listen_port, 4001)
        self.assertEqual(settings.network.hint_addresses, ("192.0.2.7", "198.51.100.1"))
        self.assertEqual(settings.limits.max_unacked_bytes, 1048576)
        self.assertEqual(settings.limits.handshake_timeout, 7.0)
        self.assertFalse(settings.network.punch)
        self.assertTrue(settings.telemetry.log_records)  # (telemetry records are log lines)
        self.assertEqual(settings.limits.max_record_size, 1000)
        self.assertEqual(settings.policy, Settings().policy)

    def test_rejected(self) -> None:
        """Values the library would refuse are refused here, naming the setting."""
        for key, value, words in (
            ("hint-port", 0, "1 to 65535"),
            ("listen-port", 70000, "0 to 65535"),
            ("handshake-timeout", 0, "positive"),
            ("peer-timeout", -1, "non-negative"),
            ("max-record-size", 0, "positive number of bytes"),
            ("hint-addresses", "", "one or more addresses"),
            ("listen-interface", " ", "expected an IP address"),
            ("listen-interface", "localhost", "expected an IP address"),
            ("log-level", "loud", "log-level must be one of"),
            ("punch", "sometimes", "on or off"),
        ):
            with self.subTest(key=key):
                e = self.assertRaises(ConfigError, build_config, {"code": "1-a", key: value})
                self.assertIn(key, str(e))
                self.assertIn(words, str(e))

    def test_sizes(self) -> None:
        """Sizes: plain bytes, k/M/G (powers of 1000) and KiB/MiB/GiB (powers of 1024)."""
        self.assertEqual(parse_size("512k"), 512_000)
        self.assertEqual(parse_size("4 MiB"), 4 * 2**20)
        self.assertEqual(parse_size(77), 77)
        self.assertRaises(ValueError, parse_size, "4 parsecs")
        self.assertEqual(parse_size("16MB"), 16_000_000)
        for bits in ("16Mb", "16mb", "512kb", "8b"):  # a lower-case b is bits: never guessed
            with self.subTest(size=bits):
                e = self.assertRaises(ValueError, parse_size, bits)
                self.assertIn("ambiguous", str(e))

    def test_prepare_sets_variables_and_level(self) -> None:
        """The given settings reach the library in the settings the session dilates with
        (``library_settings``: its own laid over the environment's, so a variable not given
        stays in force), os.environ is left alone, and prepare() sets txdilation.logs' level."""
        self.patch(os, "environ", {**os.environ, "TXDILATION_PEER_TIMEOUT": "99"})
        previous = logs._configured
        self.addCleanup(setattr, logs, "_configured", previous)
        was_installed = txdilation.is_installed()
        self.addCleanup(lambda: None if was_installed else txdilation.uninstall())
        environ = dict(os.environ)
        config = build_config({"code": "1-a", "max-record-size": "1MiB", "log-level": "error"})
        prepare(config)
        self.assertEqual(dict(os.environ), environ)
        from txdilation.session.library import library_settings

        settings = library_settings(config)  # the environment read at the edge
        self.assertEqual(settings.limits.max_record_size, 2**20)
        self.assertEqual(settings.policy.peer_timeout, 99.0)
        self.assertEqual(logs.current_level().name, "error")

    def test_documented(self) -> None:
        """docs/plugin.md lists every option and TOML key of the session."""
        doc = (REPO_ROOT / "docs" / "plugin.md").read_text()
        options = SessionOptions()
        names = [o[0] for o in options.optParameters + options.optFlags]  # type: ignore[attr-defined]
        for name in [*names, "listen", "connect", "version"]:
            with self.subTest(option=name):
                self.assertIn(f"`--{name}", doc)


class NoPathWarningTests(RealServersMixin, TestCase):
    """A session that cannot be reached says so."""

    timeout = 30

    async def test_no_listen_without_relay_warns(self) -> None:
        """--no-listen and no --relay: a 'warning' event (with advice) right after
        'starting'; with a relay, none."""
        from txdilation.session.service import Session

        logs_by_relay: dict[str | None, EventLog] = {}
        for relay in (None, self.transit_relay.hint):
            writer = StatusWriter(self.reactor)
            log = logs_by_relay[relay] = EventLog()
            writer.add_observer(log)
            raw: dict[str, Any] = {"mailbox": self.mailbox.url, "allocate-code": True}
            raw["no-listen"] = True
            if relay:
                raw["relay"] = relay
            if not txdilation.is_installed():
                txdilation.install()
                self.addCleanup(txdilation.uninstall)
            session = Session(build_config(raw), self.reactor, writer)
            session.start()
            await log.next_event("code")
            await session.stop()
        kinds = [e["kind"] for e in logs_by_relay[None].events]
        self.assertEqual(kinds[:2], ["starting", "warning"])
        warning = logs_by_relay[None].of_kind("warning")[0]
        self.assertIn("--no-listen", warning["message"])
        self.assertIn("--relay", warning["advice"])
        self.assertEqual(logs_by_relay[self.transit_relay.hint].of_kind("warning"), [])
