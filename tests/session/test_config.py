"""Tests of the session settings: TOML files, the command-line options, their merge, and the
``NAME=ENDPOINT`` forwarding specs (txdilation.session.config, .command_line, .forwarding_specs)."""

from __future__ import annotations

import os

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from txdilation.session.command_line import SessionOptions
from txdilation.session.config import (
    DEFAULT_APPID,
    DEFAULT_MAILBOX,
    SessionConfig,
    build_config,
    load_toml,
    merge,
)
from txdilation.session.forwarding_specs import (
    ForwardSpec,
    describe_address,
    parse_forward,
    validate_client,
    validate_server,
)
from txdilation.session.session_errors import ConfigError

TOML = """
mailbox = "ws://127.0.0.1:4000/v1"
appid = "example.com/forward"
allocate-code = true
relay = "tcp:127.0.0.1:4001"
ping-interval = 10
status = "status.jsonl"
drain-timeout = 2

[listen]
web = "tcp:8080:interface=127.0.0.1"

[connect]
ssh = "tcp:127.0.0.1:22"
"""


class ForwardSpecTests(SynchronousTestCase):
    """NAME=ENDPOINT parsing and endpoint validation."""

    def test_parse(self) -> None:
        """The first '=' splits; the endpoint may contain more '=' and is stripped."""
        self.assertEqual(
            parse_forward("web=tcp:8080:interface=127.0.0.1 "),
            ForwardSpec("web", "tcp:8080:interface=127.0.0.1"),
        )

    def test_bad_specs(self) -> None:
        """No '=', an empty or non-printable name, or an empty endpoint are ConfigErrors."""
        for text in ("web", "=tcp:1", "web=", "we\tb=tcp:1", "web= "):
            with self.subTest(text=text):
                self.assertRaises(ConfigError, parse_forward, text)
        self.assertRaises(ConfigError, ForwardSpec.make, "x" * 201, "tcp:1")

    def test_validation(self) -> None:
        """Server specs must parse as server endpoints, client specs as client endpoints; the
        error names the option and the spec."""
        validate_server(parse_forward("a=tcp:0:interface=127.0.0.1"))
        validate_client(parse_forward("a=tcp:127.0.0.1:80"))
        validate_server(parse_forward("a=unix:/tmp/x.sock"))
        e = self.assertRaises(ConfigError, validate_server, parse_forward("a=bogus:1"))
        self.assertIn("--listen a", str(e))
        e = self.assertRaises(ConfigError, validate_client, parse_forward("b=tcp:host"))
        self.assertIn("--connect b", str(e))

    def test_describe_address(self) -> None:
        """Addresses are shown like endpoint strings."""
        self.assertEqual(describe_address(IPv4Address("TCP", "127.0.0.1", 80)), "tcp:127.0.0.1:80")
        self.assertEqual(describe_address(IPv6Address("TCP", "::1", 80)), "tcp:[::1]:80")
        self.assertEqual(describe_address(UNIXAddress(b"/tmp/s")), "unix:/tmp/s")


class BuildConfigTests(SynchronousTestCase):
    """build_config and merge."""

    def test_defaults(self) -> None:
        """Only a code is required; the rest has stock-like defaults."""
        config = build_config({"code": "1-a-b"})
        self.assertEqual(config, SessionConfig(code="1-a-b"))
        self.assertEqual((config.mailbox, config.appid), (DEFAULT_MAILBOX, DEFAULT_APPID))
        self.assertEqual(config.drain_timeout, 30.0)

    def test_code_xor_allocate(self) -> None:
        """Exactly one of code and allocate-code."""
        self.assertRaises(ConfigError, build_config, {})
        self.assertRaises(ConfigError, build_config, {"code": "1-a", "allocate-code": True})
        self.assertTrue(build_config({"allocate-code": True}).allocate_code)

    def test_rejected_values(self) -> None:
        """Bad relay, non-positive ping interval or close timeout, negative drain timeout,
        empty mailbox, unknown keys and wrong types are ConfigErrors."""
        base = {"code": "1-a"}
        for extra in (
            {"relay": "relay.example:4001"},
            {"ping-interval": 0},
            {"close-timeout": 0},
            {"drain-timeout": -1},
            {"ping-interval": float("nan")},
            {"mailbox": ""},
            {"colour": "blue"},
            {"no-listen": "yes"},
            {"ping-interval": True},
            {"listen": {"web": 8080}},
        ):
            with self.subTest(extra=extra):
                self.assertRaises(ConfigError, build_config, {**base, **extra})
        self.assertEqual(build_config({**base, "drain-timeout": 0}).drain_timeout, 0.0)

    def test_connect_names(self) -> None:
        """connect_names lists the --connect names (the only ones the peer may open)."""
        config = build_config({"code": "1-a", "connect": {"a": "tcp:h:1", "b": "tcp:h:2"}})
        self.assertEqual(config.connect_names, ("a", "b"))

    def test_merge(self) -> None:
        """Command-line values override the file's; None means not given; listen/connect
        merge by name; a command-line code replaces the file's allocate-code."""
        file_settings = {
            "allocate-code": True,
            "appid": "file",
            "relay": "tcp:h:1",
            "listen": {"web": "tcp:1", "ssh": "tcp:2"},
        }
        merged = merge(
            file_settings,
            {"code": "7-x", "appid": None, "relay": "tcp:h:2", "listen": {"web": "tcp:3"}},
        )
        self.assertEqual(
            merged,
            {
                "appid": "file",
                "relay": "tcp:h:2",
                "code": "7-x",
                "listen": {"web": "tcp:3", "ssh": "tcp:2"},
                "connect": {},
            },
        )
        self.assertEqual(build_config(merged).code, "7-x")


class TomlTests(SynchronousTestCase):
    """load_toml."""

    def write(self, text: str) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_load(self) -> None:
        """Every setting is read, with the tables as name -> endpoint dicts."""
        config = build_config(load_toml(self.write(TOML)))
        self.assertEqual(config.mailbox, "ws://127.0.0.1:4000/v1")
        self.assertEqual(config.appid, "example.com/forward")
        self.assertTrue(config.allocate_code)
        self.assertEqual(config.relay, ("tcp:127.0.0.1:4001",))
        self.assertEqual(config.ping_interval, 10.0)
        self.assertEqual(config.status, "status.jsonl")
        self.assertEqual(config.drain_timeout, 2.0)
        self.assertEqual(config.listen, (ForwardSpec("web", "tcp:8080:interface=127.0.0.1"),))
        self.assertEqual(config.connect, (ForwardSpec("ssh", "tcp:127.0.0.1:22"),))

    def test_errors(self) -> None:
        """A missing file, invalid TOML, unknown keys and bad tables name the file."""
        missing = os.path.join(self.mktemp(), "nope.toml")
        self.assertIn("cannot read", str(self.assertRaises(ConfigError, load_toml, missing)))
        for text in ("mailbox = ", "colour = 1", "listen = 3", "[connect]\nssh = 22"):
            with self.subTest(text=text):
                path = self.write(text)
                self.assertIn(path, str(self.assertRaises(ConfigError, load_toml, path)))


class OptionsTests(SynchronousTestCase):
    """SessionOptions, as twistd and txdilation run parse them."""

    def parse(self, *argv: str) -> SessionConfig:
        options = SessionOptions()
        options.parseOptions(list(argv))
        assert options.config is not None
        return options.config

    def test_options(self) -> None:
        """Repeated --listen/--connect, flags and numbers end up in the config."""
        config = self.parse(
            "--code=3-x-y",
            "--listen",
            "web=tcp:8080:interface=127.0.0.1",
            "--listen",
            "api=tcp:8081",
            "--connect",
            "ssh=tcp:127.0.0.1:22",
            "--no-listen",
            "--ping-interval",
            "2.5",
            "--status",
            "-",
        )
        self.assertEqual([f.name for f in config.listen], ["web", "api"])
        self.assertEqual(config.connect_names, ("ssh",))
        self.assertTrue(config.no_listen)
        self.assertEqual(config.ping_interval, 2.5)
        self.assertEqual(config.status, "-")

    def test_relay_repeatable(self) -> None:
        """--relay may be given once per relay; each keeps its order; a bad one is refused."""
        config = self.parse(
            "--code=3-x-y",
            "--relay",
            "tcp:10.0.0.1:4001",
            "--relay",
            "tcp:relay.example:4001,ws://relay.example:4002/",
        )
        self.assertEqual(
            config.relay, ("tcp:10.0.0.1:4001", "tcp:relay.example:4001,ws://relay.example:4002/")
        )
        self.assertEqual(self.parse("--code=3-x-y").relay, ())
        self.assertRaises(usage.UsageError, self.parse, "--code=3-x-y", "--relay", "udp:h:1")

    def test_relay_list_in_toml(self) -> None:
        """The TOML ``relay`` takes a list (one per relay) or a string; --relay replaces it."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('code = "1-a-b"\nrelay = ["tcp:10.0.0.1:4001", "ws://10.0.0.2:4002/"]\n')
        config = self.parse("--config", path)
        self.assertEqual(config.relay, ("tcp:10.0.0.1:4001", "ws://10.0.0.2:4002/"))
        config = self.parse("--config", path, "--relay", "tcp:10.0.0.3:4001")
        self.assertEqual(config.relay, ("tcp:10.0.0.3:4001",))
        with open(path, "w") as f:
            f.write('code = "1-a-b"\nrelay = "tcp:10.0.0.1:4001"\n')
        self.assertEqual(self.parse("--config", path).relay, ("tcp:10.0.0.1:4001",))
        with open(path, "w") as f:
            f.write('code = "1-a-b"\nrelay = ["tcp:10.0.0.1:4001", 3]\n')
        self.assertRaises(usage.UsageError, self.parse, "--config", path)

    def test_config_file_and_override(self) -> None:
        """--config reads the TOML file; options given on the command line win."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(TOML)
        config = self.parse("--config", path, "--code", "4-a-b", "--listen", "web=tcp:9090")
        self.assertEqual(config.code, "4-a-b")
        self.assertFalse(config.allocate_code)
        self.assertEqual(config.listen, (ForwardSpec("web", "tcp:9090"),))
        self.assertEqual(config.relay, ("tcp:127.0.0.1:4001",))

    def test_usage_errors(self) -> None:
        """Problems are UsageErrors naming the option (twistd prints them with the usage)."""
        for argv, needle in (
            (["--listen", "web"], "--listen"),
            (["--code", "1-a", "--listen", "web=nope:1"], "--listen web"),
            ([], "code"),
            (["--code", "1-a", "--ping-interval", "x"], "number of seconds, not 'x'"),
            (["--code", "1-a", "--config", "/nonexistent/x.toml"], "cannot read"),
        ):
            with self.subTest(argv=argv):
                e = self.assertRaises(usage.UsageError, SessionOptions().parseOptions, argv)
                self.assertIn(needle, str(e))
