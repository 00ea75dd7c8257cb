"""``txdilation exec``, ``enable``, ``disable`` and ``which`` as a person runs them: real
processes, a command's stdio, exit status and signals untouched, one-line errors, the proof
lines every Python process writes, a Python from elsewhere left alone, and the switch in a
fresh virtualenv (applications: tests/test_exec_apps.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
import venv
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.support.execs import proof_lines, txdilation_command
from tests.support.tiers import find_python
from txdilation import __version__
from txdilation.wrap.switch import PTH_LINE, PTH_NAME

TIMEOUT = 60


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to the end (bounded), text output captured."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("timeout", TIMEOUT)
    return subprocess.run(list(args), text=True, check=False, **kwargs)


def txd(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``txdilation ARGS...``."""
    return run(*txdilation_command(), *args, **kwargs)


class CommandTests(SynchronousTestCase):
    """What the command run under ``txdilation exec`` sees: its own stdio, status, signals."""

    def test_a_non_python_command_keeps_its_stdio_and_status(self) -> None:
        """``txdilation exec sh -c ...``: stdin reaches it, its stdout and stderr are its own,
        and its exit status is the exit status."""
        done = txd("exec", "sh", "-c", "cat; echo to-stderr >&2; exit 42", input="to-stdin\n")
        self.assertEqual(
            (done.stdout, done.stderr, done.returncode), ("to-stdin\n", "to-stderr\n", 42)
        )

    def test_the_command_replaces_txdilation(self) -> None:
        """The command runs in the process ``txdilation exec`` started as (no process in
        between to relay anything), and a Python command's exit status passes through."""
        code = "import os, sys; print(os.getpid()); sys.exit(3)"
        proc = subprocess.Popen(
            [*txdilation_command(), "exec", sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = proc.communicate(timeout=TIMEOUT)
        self.assertEqual((int(out), proc.returncode), (proc.pid, 3))

    def test_signals_reach_the_command(self) -> None:
        """SIGINT, SIGTERM and SIGHUP sent to the process reach the command's own handlers;
        a command without a handler dies of the signal, as it would without txdilation."""
        handler = textwrap.dedent("""
            import os, signal, sys, time
            def got(number, frame):  # os.write: the signal may come inside print("ready")
                os.write(1, (signal.Signals(number).name + "\\n").encode())
                os._exit(100 + number)
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):
                signal.signal(getattr(signal, name), got)
            print("ready", flush=True)
            time.sleep(60)
        """)
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            number = getattr(signal, name)
            with self.subTest(signal=name):
                proc = subprocess.Popen(
                    [*txdilation_command(), "exec", sys.executable, "-c", handler],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert proc.stdout is not None
                self.assertEqual(proc.stdout.readline(), "ready\n")
                proc.send_signal(number)
                out, _ = proc.communicate(timeout=TIMEOUT)
                self.assertEqual((out, proc.returncode), (f"{name}\n", 100 + number))
        proc = subprocess.Popen([*txdilation_command(), "exec", "sleep", "60"])
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=TIMEOUT), -signal.SIGTERM)

    def test_signal_dispositions_are_the_ones_it_would_have(self) -> None:
        """The command starts with the signal dispositions it gets without txdilation (Python
        ignores SIGPIPE for itself; ``exec`` restores it, as ``subprocess`` does): ``yes`` dies
        of SIGPIPE when its reader goes away, and /proc shows the same ignored set."""

        def ignored(*prefix: str) -> list[int]:
            """The standard signals (1 to 31) ``cat`` starts with ignored: glibc keeps 32 and
            33 for itself (a Python 3.13 parent leaves them marked in a Python child)."""
            status = run(*prefix, "cat", "/proc/self/status").stdout
            line = next(line for line in status.splitlines() if line.startswith("SigIgn"))
            mask = int(line.split()[1], 16)
            return [n for n in range(1, 32) if mask & (1 << (n - 1))]

        self.assertEqual(ignored(*txdilation_command(), "exec"), ignored())
        for prefix in ([], [*txdilation_command(), "exec"]):
            with self.subTest(prefix=prefix):
                proc = subprocess.Popen([*prefix, "yes"], stdout=subprocess.PIPE)
                assert proc.stdout is not None
                proc.stdout.read(4096)
                proc.stdout.close()
                self.assertEqual(proc.wait(timeout=TIMEOUT), -signal.SIGPIPE)


class ErrorTests(SynchronousTestCase):
    """Mistakes get one line on stderr and the shell's exit statuses."""

    def assert_one_line(
        self, done: subprocess.CompletedProcess[str], status: int, text: str
    ) -> None:
        self.assertEqual(done.returncode, status, done.stderr)
        self.assertEqual(done.stdout, "")
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn(text, done.stderr)
        self.assertTrue(done.stderr.startswith("txdilation exec"), done.stderr)

    def test_a_missing_command_is_127(self) -> None:
        """A command found nowhere on PATH, or a path to nothing: 127."""
        self.assert_one_line(txd("exec", "no-such-command-here"), 127, "command not found")
        self.assert_one_line(txd("exec", "./no/such/file"), 127, "No such file or directory")

    def test_a_command_that_cannot_run_is_126(self) -> None:
        """A file without the execute bit, or a directory: 126."""
        with tempfile.TemporaryDirectory() as scratch:
            plain = Path(scratch, "plain.sh")
            plain.write_text("echo never\n")
            self.assert_one_line(txd("exec", str(plain)), 126, "Permission denied")
            self.assert_one_line(txd("exec", scratch), 126, "Permission denied")

    def test_usage_and_setting_mistakes_are_2(self) -> None:
        """No command, an unknown option, an option without its value, an unknown semantics
        or an invalid TXDILATION_* variable: one line naming it, exit 2, nothing run."""
        for args, text in (
            ([], "no command given"),
            (["--sematics", "stock", "true"], "unknown option '--sematics'"),
            (["--proof"], "--proof needs a value"),
            (["--semantics", "strict", "true"], "unknown semantics 'strict'"),
        ):
            with self.subTest(args=args):
                self.assert_one_line(txd("exec", *args), 2, text)
        env = dict(os.environ, TXDILATION_PEER_TIMEOUT="soon")
        self.assert_one_line(txd("exec", "true", env=env), 2, "TXDILATION_PEER_TIMEOUT")

    def test_help(self) -> None:
        """``txdilation exec --help`` describes the options and exit statuses, exit 0; the
        other commands have a help line too, and refuse arguments with one line."""
        done = txd("exec", "--help")
        self.assertEqual(done.returncode, 0)
        for word in ("--semantics", "--events", "--proof", "126", "127"):
            self.assertIn(word, done.stdout)
        for name in ("enable", "disable", "which"):
            self.assertEqual(txd(name, "--help").returncode, 0)
            refused = txd(name, "--now")
            self.assertEqual((refused.returncode, len(refused.stderr.splitlines())), (2, 1))
        self.assertIn("exec", txd("--help").stdout)


class ProofTests(SynchronousTestCase):
    """``--proof FILE``: one line per Python process, whether txdilation took effect there."""

    def setUp(self) -> None:
        self.proof = os.path.join(self.mktemp() + ".jsonl")

    def test_every_python_process_under_it_proves_it(self) -> None:
        """A Python program that starts another Python program, both importing wormhole:
        two lines, one per process, each on txdilation with txdilation's, magic-wormhole's,
        Twisted's and Python's versions; a relative path is the file in the start
        directory."""
        child = "import wormhole, os; print(os.getpid())"
        parent = (
            "import subprocess, sys, wormhole; "
            f"subprocess.run([sys.executable, '-c', {child!r}], check=True)"
        )
        scratch = os.path.dirname(self.proof)
        done = txd(
            "exec",
            "--proof",
            os.path.basename(self.proof),
            sys.executable,
            "-c",
            parent,
            cwd=scratch,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = proof_lines(self.proof)
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual({line["pid"] for line in lines} & {int(done.stdout)}, {int(done.stdout)})
        for line in lines:
            self.assertTrue(line["took_effect"], line)
            self.assertEqual(line["implementation"], "txdilation")
            self.assertEqual(line["armed_by"], "sitecustomize")
            versions = line["versions"]
            self.assertEqual(versions["txdilation"], __version__)
            self.assertEqual(set(versions), {"txdilation", "magic-wormhole", "twisted", "python"})
            self.assertTrue(all(versions.values()), versions)

    def test_a_process_that_never_imports_wormhole(self) -> None:
        """One line at its exit: not in effect, because there was nothing to replace; it
        loaded nothing of Twisted or wormhole."""
        code = (
            "import sys; print([m for m in sys.modules if m.startswith(('twisted', 'wormhole'))])"
        )
        done = txd("exec", "--proof", self.proof, sys.executable, "-c", code)
        self.assertEqual((done.returncode, done.stdout), (0, "[]\n"))
        [line] = proof_lines(self.proof)
        self.assertFalse(line["took_effect"])
        self.assertIn("never imported wormhole", line["reason"])

    def test_a_python_from_elsewhere_runs_as_without_txdilation(self) -> None:
        """A Python that cannot import txdilation (a bare virtualenv of this interpreter; an old
        Python 2.7 when pyenv has one) prints exactly what it prints without txdilation exec,
        with the same status; its proof line says txdilation did not take effect, and why."""
        bare = self.mktemp()
        venv.EnvBuilder(with_pip=False, symlinks=True).create(bare)
        others = [os.path.join(bare, "bin", "python")]
        others += [p for p in [find_python("2.7")] if p is not None]
        code = "import sys; print(sys.version_info[0]); sys.stderr.write('err\\n'); sys.exit(5)"
        for python in others:
            with self.subTest(python=python):
                direct = run(python, "-c", code)
                under = txd("exec", "--proof", self.proof, python, "-c", code)
                self.assertEqual(
                    (under.stdout, under.stderr, under.returncode),
                    (direct.stdout, direct.stderr, direct.returncode),
                )
                line = proof_lines(self.proof)[-1]
                self.assertFalse(line["took_effect"])
                self.assertIn("not importable", line["reason"])
                os.remove(self.proof)

    def test_a_failed_install_leaves_stock_and_says_so(self) -> None:
        """If installing txdilation fails, the process goes on with stock's Dilation; one line
        on stderr and the proof line say why."""
        code = textwrap.dedent("""
            import txdilation._install as i
            def broken(*args): raise RuntimeError('broken on purpose')
            i.install = broken
            import wormhole._boss
            print(wormhole._boss.Dilator.__module__)
        """)
        done = txd("exec", "--proof", self.proof, sys.executable, "-c", code)
        self.assertEqual((done.returncode, done.stdout), (0, "wormhole._dilation.manager\n"))
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertIn("broken on purpose", done.stderr)
        [line] = proof_lines(self.proof)
        self.assertEqual((line["took_effect"], line["implementation"]), (False, "magic-wormhole"))
        self.assertIn("broken on purpose", line["reason"])


class EnvironmentTests(SynchronousTestCase):
    """What reaches the command: txdilation's settings; the user's own sitecustomize still
    runs."""

    def test_settings_reach_every_process(self) -> None:
        """``--semantics``, ``--events`` (made absolute) and a TXDILATION_* variable of the
        environment are what txdilation's settings read in the command."""
        code = textwrap.dedent("""
            import json, os
            from txdilation.settings import Settings
            s = Settings.from_environ(os.environ)
            print(json.dumps([s.semantics.name, s.telemetry.events_path, s.policy.peer_timeout]))
        """)
        scratch = self.mktemp()
        os.makedirs(scratch)
        env = dict(os.environ, TXDILATION_PEER_TIMEOUT="7")
        done = txd(
            "exec",
            "--semantics",
            "twisted",
            "--events",
            "events.jsonl",
            "--",
            sys.executable,
            "-c",
            code,
            env=env,
            cwd=scratch,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        events = os.path.join(os.path.abspath(scratch), "events.jsonl")
        self.assertEqual(json.loads(done.stdout), ["twisted", events, 7.0])

    def test_the_sitecustomize_already_there_still_runs(self) -> None:
        """A ``sitecustomize`` the environment already had on PYTHONPATH runs too."""
        scratch = self.mktemp()
        os.makedirs(scratch)
        Path(scratch, "sitecustomize.py").write_text("import os\nos.environ['MINE'] = 'ran'\n")
        env = dict(os.environ, PYTHONPATH=scratch)
        code = "import os, wormhole._boss as b; print(os.environ.get('MINE'), b.Dilator.__module__)"
        done = txd("exec", sys.executable, "-c", code, env=env)
        self.assertEqual(done.stdout, "ran txdilation._stock.manager\n", done.stderr)


class SwitchTests(SynchronousTestCase):
    """``txdilation enable``/``disable``/``which`` in a fresh virtualenv (its own
    site-packages, where the switch goes; txdilation and its dependencies come from this
    environment through a path file)."""

    timeout = 120

    def make_venv(self) -> str:
        where = self.mktemp()
        venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
        python = os.path.join(where, "bin", "python")
        site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        shared = sysconfig.get_paths()["purelib"]
        Path(site.stdout.strip(), "00-shared.pth").write_text(
            f"import site; site.addsitedir({shared!r})\n"
        )
        self.site_packages = Path(site.stdout.strip())
        return python

    def test_enable_which_disable(self) -> None:
        """Off at first: a process dilates through stock and ``which`` says so. ``enable``:
        a process there dilates through txdilation (proof line: armed by the path file),
        ``which`` says so with the versions, ``TXDILATION_DROPIN=0`` opts one process out.
        ``disable``: stock again, and site-packages is exactly as before ``enable``."""
        python = self.make_venv()
        before = sorted(os.listdir(self.site_packages))
        dilator = "import wormhole._boss as b; print(b.Dilator.__module__)"

        def which() -> list[str]:
            done = run(python, "-m", "txdilation", "which")
            self.assertEqual(done.returncode, 0, done.stderr)
            return done.stdout.splitlines()

        self.assertEqual(run(python, "-c", dilator).stdout, "wormhole._dilation.manager\n")
        self.assertTrue(which()[0].startswith("dilation: stock magic-wormhole"), which())
        self.assertTrue(which()[1].startswith("switch: off"), which())

        done = run(python, "-m", "txdilation", "enable")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue((self.site_packages / PTH_NAME).exists())
        self.assertEqual(run(python, "-m", "txdilation", "enable").returncode, 0)  # idempotent
        proof = self.mktemp()
        env = dict(os.environ, TXDILATION_DROPIN_PROOF=proof)
        self.assertEqual(run(python, "-c", dilator, env=env).stdout, "txdilation._stock.manager\n")
        [line] = proof_lines(proof)
        self.assertEqual((line["took_effect"], line["armed_by"]), (True, "pth"))
        report = which()
        self.assertEqual(report[0], f"dilation: txdilation {__version__}")
        self.assertTrue(report[1].startswith("switch: on"), report)
        self.assertEqual(report[3:5][0], f"txdilation {__version__}")
        self.assertTrue(report[-1].startswith("Python "), report)
        opted_out = run(python, "-c", dilator, env=dict(os.environ, TXDILATION_DROPIN="0"))
        self.assertEqual(opted_out.stdout, "wormhole._dilation.manager\n")

        done = run(python, "-m", "txdilation", "disable")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(sorted(os.listdir(self.site_packages)), before)
        self.assertEqual(run(python, "-c", dilator).stdout, "wormhole._dilation.manager\n")
        self.assertTrue(which()[0].startswith("dilation: stock"), which())
        self.assertEqual(run(python, "-m", "txdilation", "disable").returncode, 0)

    def test_a_switch_left_behind_does_nothing(self) -> None:
        """The path file of an environment whose txdilation was removed since: Python starts
        as usual, without a word."""
        python = self.make_venv()
        (self.site_packages / PTH_NAME).write_text(PTH_LINE)
        (self.site_packages / "00-shared.pth").unlink()
        done = run(python, "-c", "print('fine')")
        self.assertEqual((done.stdout, done.stderr, done.returncode), ("fine\n", "", 0))


class LeanTests(SynchronousTestCase):
    """What ``exec`` costs: no Twisted and no wormhole are loaded on its way (the figures
    are in benchmarks/exec_startup.py)."""

    def test_nothing_heavy_is_imported(self) -> None:
        """The ``txdilation`` command's way to ``exec`` (shown with ``exec --help``) and the
        start-up hook of a Python under it import neither Twisted nor wormhole."""
        heavy = "sorted(m for m in sys.modules if m.startswith(('twisted', 'wormhole', 'attr')))"
        code = f"import sys, txdilation.__main__ as m; m.main(['exec', '-h']); print({heavy})"
        done = run(sys.executable, "-c", code)
        self.assertEqual(done.stdout.splitlines()[-1], "[]", done.stderr)
        done = txd("exec", sys.executable, "-c", f"import sys; print({heavy})")
        self.assertEqual(done.stdout, "[]\n", done.stderr)
