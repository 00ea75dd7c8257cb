"""
The trial set (tests/trial_set.py) stays honest: every test module is either run under trial
in CI or recorded with its kinds, every kind has a representative under trial, and every name
in the set still loads.
"""

from __future__ import annotations

import re
from pathlib import Path

from twisted.trial import runner
from twisted.trial.unittest import SynchronousTestCase

from tests.trial_set import COVERED, KINDS, TRIAL, all_test_modules, kinds_of, module_of

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Kinds trial cannot run (pytest-only functions): recorded, never represented.
NOT_UNDER_TRIAL = frozenset({"pytest-only"})


class TrialSetTests(SynchronousTestCase):
    def test_every_module_is_run_or_recorded_once(self) -> None:
        """A test module is in the trial set or in COVERED, not both; nothing else is listed."""
        run = {module_of(name) for name, _ in TRIAL}
        modules = set(all_test_modules())
        self.assertEqual(sorted(run & set(COVERED)), [], "both run under trial and COVERED")
        self.assertEqual(
            sorted(modules - run - set(COVERED)),
            [],
            "new test modules: add each to COVERED in tests/trial_set.py with the kinds "
            "kinds_of() gives (or name some of its tests in TRIAL)",
        )
        self.assertEqual(sorted(set(COVERED) - modules), [], "COVERED names a module now gone")

    def test_recorded_kinds_are_current(self) -> None:
        """Each COVERED module still holds exactly the kinds recorded for it: a module that
        starts to use namespaces, Spark or child processes, say, is noticed."""
        stale = {
            module: (sorted(recorded), sorted(kinds_of(module)))
            for module, recorded in COVERED.items()
            if kinds_of(module) != recorded
        }
        self.assertEqual(
            stale,
            {},
            "kinds changed (recorded, now): update COVERED in tests/trial_set.py, and give a "
            "new kind a representative in TRIAL",
        )

    def test_every_kind_has_a_representative_under_trial(self) -> None:
        """Each kind found anywhere in the suite is stood for by a test run under trial, and a
        test stands only for kinds its module holds."""
        found: set[str] = set()
        for module in all_test_modules():
            found |= kinds_of(module)
        self.assertLessEqual(found, set(KINDS), "kinds_of() found a kind KINDS does not name")
        represented: set[str] = set()
        for name, kinds in TRIAL:
            self.assertLessEqual(kinds, kinds_of(module_of(name)) - NOT_UNDER_TRIAL, name)
            represented |= kinds
        self.assertEqual(
            sorted(found - NOT_UNDER_TRIAL - represented),
            [],
            "kinds with no representative under trial: name a test of each in TRIAL",
        )

    def test_every_name_loads(self) -> None:
        """Every name in TRIAL loads at least one test (a renamed test is noticed), and
        ``testSuite()`` is what trial runs for ``tests.trial_set``."""
        loader = runner.TestLoader()
        for name, _ in TRIAL:
            self.assertGreater(loader.loadByName(name).countTestCases(), 0, name)
        suite = loader.loadByName("tests.trial_set")
        self.assertEqual(
            suite.countTestCases(), sum(loader.loadByName(n).countTestCases() for n, _ in TRIAL)
        )

    def test_ci_runs_everything_under_pytest_and_this_set_under_trial(self) -> None:
        """README's test command (the one .ci/run runs, see tests/test_quality.py) runs the
        whole suite under pytest, then this set under trial."""
        readme = (REPO_ROOT / "README.md").read_text()
        command = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)[1]
        self.assertIn(" python -m pytest &&", command)
        self.assertTrue(command.endswith(" python -m twisted.trial tests.trial_set"), command)
