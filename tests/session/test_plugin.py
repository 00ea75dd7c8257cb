"""The twistd plugin ``dilation``: discovered by twistd, loaded lazily, shipped by packaging.

(What the plugin's service does is pinned by tests/session/test_processes.py, which runs it
under ``twistd -n``.)
"""

from __future__ import annotations

import subprocess
import sys

from setuptools import find_namespace_packages
from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.trial.unittest import SynchronousTestCase

from tests.support.harness import REPO_ROOT, SRC_DIR
from txdilation.session import tap


class PluginTests(SynchronousTestCase):
    """Discovery and packaging of src/twisted/plugins/txdilation_plugin.py."""

    def test_discovered(self) -> None:
        """twistd finds a service maker named 'dilation' whose options and makeService are
        txdilation.session.tap's."""
        makers = {m.tapname: m for m in getPlugins(IServiceMaker)}
        self.assertIn("dilation", makers)
        maker = makers["dilation"]
        self.assertIs(maker.options, tap.Options)
        self.assertIs(maker.makeService, tap.makeService)
        self.assertIn("dilated", maker.description)

    def test_lazy(self) -> None:
        """Listing plugins imports neither the session code nor wormhole; loading the
        plugin's options (and the process entry points) does not import wormhole either, so
        txdilation.install() runs before wormhole is first imported."""
        code = (
            "import sys; from twisted.plugin import getPlugins;"
            "from twisted.application.service import IServiceMaker;"
            "makers = {m.tapname: m for m in getPlugins(IServiceMaker)};"
            "print('dilation' in makers, 'txdilation.session' in sys.modules,"
            " 'wormhole' in sys.modules);"
            "makers['dilation'].options().parseOptions(['--code', '1-a']);"
            "import txdilation.session.process, txdilation.session.foreground;"
            "print('wormhole' in sys.modules)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        self.assertEqual(out, ["True", "False", "False", "False"])

    def test_namespace_and_packaging(self) -> None:
        """src/twisted/plugins has no __init__.py (Twisted extends the namespace), setup.cfg's
        package discovery ships it, and the plugin cache is ignored by git."""
        plugins = SRC_DIR / "twisted" / "plugins"
        self.assertFalse((plugins / "__init__.py").exists())
        self.assertFalse((SRC_DIR / "twisted" / "__init__.py").exists())
        found = find_namespace_packages(
            where=str(SRC_DIR), include=["txdilation", "txdilation.*", "twisted.plugins"]
        )
        self.assertIn("twisted.plugins", found)
        self.assertIn("txdilation.session", found)
        setup_cfg = (REPO_ROOT / "setup.cfg").read_text()
        self.assertIn("packages = find_namespace:", setup_cfg)
        self.assertIn("twisted.plugins", setup_cfg)
        self.assertIn("dropin.cache", (REPO_ROOT / ".gitignore").read_text().split())
