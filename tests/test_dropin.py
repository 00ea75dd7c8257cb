"""The drop-in surface: txdilation.install()/uninstall() in fresh interpreters, and stock
magic-wormhole's own dilation integration tests run against txdilation."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

from twisted.trial.unittest import TestCase

from tests.support.tier_steps import stock_dilation_tests

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


class InstallTests(TestCase):
    timeout = 120

    def check(self, code: str) -> None:
        result = run_python(code)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("OK", result.stdout)

    def test_install_before_wormhole_import(self) -> None:
        """install() before `import wormhole`: stock's modules see txdilation's Dilator,
        DILATION_VERSIONS, Connector and SubchannelAddress; submodules are not loaded twice."""
        self.check("""
            import sys, txdilation
            txdilation.install()
            import wormhole, wormhole._boss, wormhole.wormhole
            import txdilation._stock.manager as manager
            import txdilation._stock.connector as connector
            import txdilation._stock.subchannel as subchannel
            assert wormhole._boss.Dilator is manager.Dilator
            assert wormhole.wormhole.Connector is connector.Connector
            assert wormhole.wormhole.DILATION_VERSIONS is manager.DILATION_VERSIONS
            assert wormhole.SubchannelAddress is subchannel.SubchannelAddress
            assert sys.modules["wormhole._dilation.manager"] is manager
            from wormhole._dilation._noise import NoiseConnection
            assert NoiseConnection
            from wormhole._dilation.connector import ipaddrs
            assert ipaddrs.find_addresses
            assert txdilation.__spec__.name == "txdilation"
            assert txdilation._stock.manager.__spec__.name == "txdilation._stock.manager"
            from importlib import resources
            assert resources.files("txdilation").joinpath("py.typed").is_file()
            print("OK")
        """)

    def test_install_after_wormhole_import_and_uninstall(self) -> None:
        """install() after `import wormhole` rebinds the names stock bound at import time;
        uninstall() restores stock's objects exactly."""
        self.check("""
            import wormhole, wormhole._boss, wormhole.wormhole
            import wormhole._dilation.manager as stock_manager
            stock_dilator = wormhole._boss.Dilator
            import txdilation
            txdilation.install()
            import txdilation._stock.manager
            assert wormhole._boss.Dilator is txdilation._stock.manager.Dilator
            import wormhole._dilation.manager as m
            assert m is txdilation._stock.manager
            txdilation.uninstall()
            txdilation.uninstall()
            assert wormhole._boss.Dilator is stock_dilator
            import wormhole._dilation.manager as m2
            assert m2 is stock_manager
            print("OK")
        """)

    def test_create_uses_txdilation(self) -> None:
        """A wormhole created by stock's create(dilation=True) after install() has a
        txdilation Dilator and advertises can-dilate ["ged"]."""
        self.check("""
            import txdilation
            txdilation.install()
            from twisted.internet import reactor
            import wormhole, txdilation._stock.manager
            w = wormhole.create("appid", "ws://127.0.0.1:1/v1", reactor, dilation=True)
            assert isinstance(w._boss._D, txdilation._stock.manager.Dilator), type(w._boss._D)
            print("OK")
        """)


class PublicSurfaceTests(TestCase):
    """The names applications import from stock's module paths, and the objects the API
    returns, are stock's classes' stand-ins (issue 11: fowl imports DilatedWormhole)."""

    timeout = 120

    def test_stock_module_paths_give_the_classes_the_api_returns(self) -> None:
        """After install(): the endpoint, port, address and error classes importable from
        ``wormhole._dilation.subchannel``/``.manager`` are the ones ``dilate()``,
        ``connector_for`` and ``listener_for`` return, with stock's interfaces; ``send_ping``
        exists on the manager."""
        result = run_python("""
            import txdilation
            txdilation.install()
            from twisted.internet import reactor
            from twisted.internet.interfaces import IStreamClientEndpoint, IStreamServerEndpoint
            import wormhole
            from wormhole._dilation.manager import (
                DilatedWormhole, CanOnlyDilateOnceError, OldPeerCannotDilateError)
            from wormhole._dilation.subchannel import (
                SubchannelConnectorEndpoint, SubchannelListenerEndpoint,
                SubchannelListeningPort, SubchannelAddress, AlreadyClosedError,
                NormalCloseUsedOnHalfCloseable, HalfCloseUsedOnNonHalfCloseable,
                UnexpectedSubprotocol, MAX_FRAME_LENGTH)
            w = wormhole.create("appid", "ws://127.0.0.1:1/v1", reactor, dilation=True)
            dw = w.dilate()
            assert isinstance(dw, DilatedWormhole)
            c, l = dw.connector_for("x"), dw.listener_for("x")
            assert isinstance(c, SubchannelConnectorEndpoint)
            assert IStreamClientEndpoint.providedBy(c)
            assert isinstance(l, SubchannelListenerEndpoint)
            assert IStreamServerEndpoint.providedBy(l)
            assert SubchannelListeningPort.__name__ == "SubchannelListeningPort"
            assert wormhole.SubchannelAddress is SubchannelAddress
            assert SubchannelAddress("x").subprotocol == "x"
            assert callable(w._boss._D._manager.send_ping)
            print("OK")
        """)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("OK", result.stdout)


class StockIntegrationTests(TestCase):
    timeout = 300

    def test_stock_dilation_integration_tests_pass(self) -> None:
        """`pytest -p txdilation.dropin --pyargs wormhole.test.dilate.test_full
        wormhole.test.dilate.test_api wormhole.test.dilate.test_connect`: all 8 of
        magic-wormhole's own dilation integration tests pass against txdilation."""
        env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env["TXDILATION_LISTEN_INTERFACE"] = "127.0.0.1"
        env["TXDILATION_HINT_ADDRESSES"] = "127.0.0.1"
        with tempfile.TemporaryDirectory() as cwd:
            result = subprocess.run(
                stock_dilation_tests(sys.executable),
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=280,
                check=False,
            )
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output[-6000:])
        self.assertIn("8 passed", output, output[-3000:])
        self.assertIn("wormhole._dilation -> txdilation", output)
