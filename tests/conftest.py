"""
pytest glue: the Twisted reactor for pytest-twisted, real-server fixtures, loopback, timeouts.

Layer: test infrastructure (pytest only; ``python -m twisted.trial tests`` never loads it).

- pytest-twisted (``--reactor=default``, set in pyproject) runs the reactor in a greenlet once a
  pytest-style test or async fixture needs it. Trial ``TestCase`` s spin the reactor themselves
  (``TestCase._wait`` calls ``reactor.run()``), which fails once that greenlet has started the
  reactor. ``_GreenletAwareWait`` makes trial wait by switching to pytest-twisted's greenlet
  instead, so trial TestCases returning Deferreds and pytest-twisted tests mix in one run, in
  any order. Trial's own ``timeout`` keeps working.
- Fixtures: ``reactor``, ``mailbox`` (``tests.support.harness.MailboxServer``) and ``transit_relay``
  (``tests.support.harness.TransitRelay``), fresh per test (a longer-lived server would look like a
  leaked port to the reactor check of any trial TestCase that runs meanwhile).
- ``tests.support.harness.loopback_env()`` is set in ``os.environ`` for the whole run; trial
  TestCases run in a scratch working directory, as under trial.
- Timeouts: trial TestCases use trial's ``timeout`` attribute. Other Twisted tests (Deferred or
  coroutine results) fail after ``@pytest.mark.timeout(seconds)`` or ``DEFAULT_TIMEOUT``
  seconds, unless the pytest-timeout plugin is installed, which then owns the marker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, ensureDeferred

from tests.support.harness import (
    MailboxServer,
    TransitRelay,
    apply_loopback_env,
    start_mailbox_server,
    start_transit_relay,
)

DEFAULT_TIMEOUT = 120.0

#: the release and per-Python tiers, in the background of the session (tests/test_tiers.py)
pytest_plugins = ["tests.support.tiers_plugin"]


def pytest_configure(config: pytest.Config) -> None:
    apply_loopback_env()
    _GreenletAwareWait.install()


# ---------------------------------------------------------------------------------------------
# trial TestCases under pytest-twisted


class _WakingScheduler:
    """
    Stands in for the reactor as a trial TestCase's ``_twistedPrivateScheduler`` while the
    reactor runs in pytest-twisted's greenlet: ``crash()`` (trial's last resort on a timeout)
    must wake the waiting test, not stop the shared reactor.
    """

    def __init__(self, reactor: Any, wake: Callable[[], None]) -> None:
        self._reactor = reactor
        self._wake = wake

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return self._reactor.callLater(delay, f, *args, **kw)

    def crash(self) -> None:
        self._reactor.callLater(0, self._wake)


class _GreenletAwareWait:
    """Replacement for ``twisted.trial._asynctest.TestCase._wait`` (see module docstring)."""

    _original: Any = None

    @classmethod
    def install(cls) -> None:
        from twisted.trial import _asynctest

        if cls._original is None:
            cls._original = _asynctest.TestCase._wait
            _asynctest.TestCase._wait = cls.wait  # type: ignore[method-assign]

    @staticmethod
    def _reactor_greenlet() -> Any:
        import greenlet
        from twisted.internet import reactor

        gr = getattr(getattr(pytest_twisted, "_instances", None), "gr_twisted", None)
        if gr is None or not reactor.running or greenlet.getcurrent() is gr:
            return None
        return gr

    @staticmethod
    def wait(testcase: Any, d: Deferred[Any], running: list[None] | None = None) -> None:
        from twisted.internet import reactor
        from twisted.trial import _asynctest

        running = _asynctest._wait_is_running if running is None else running
        if _GreenletAwareWait._reactor_greenlet() is None:
            _GreenletAwareWait._original(testcase, d, running)
            return
        if running:
            raise RuntimeError("_wait is not reentrant")
        woken: Deferred[None] = Deferred()

        def wake(_: object = None) -> None:
            if not woken.called:
                woken.callback(None)

        def wake_later(result: object) -> None:
            # Wake from a timed call, never from where ``d`` fired: if that is the reactor's
            # thread-call queue (a test whose last wait was deferToThread), switching to the
            # test's greenlet there leaves the reactor in the middle of that queue, and trial's
            # janitor (``reactor.iterate()`` after the test) would run the same entry again:
            # a Deferred called twice. The result is consumed, as trial's own ``_wait`` does
            # (trial reported it already): a timed-out test's failure left in ``d`` would be
            # logged as "Unhandled error in Deferred" whenever ``d`` is collected, failing
            # whichever test runs then.
            reactor.callLater(0, wake)

        running.append(None)
        testcase._twistedPrivateScheduler = _WakingScheduler(reactor, wake)
        try:
            d.addBoth(wake_later)
            pytest_twisted.blockon(woken)
        finally:
            testcase._twistedPrivateScheduler = reactor
            running.pop()


# ---------------------------------------------------------------------------------------------
# timeouts for pytest-style Twisted tests


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    """Bound Deferred/coroutine tests in time (pytest-twisted then runs the wrapped function)."""
    original = pyfuncitem.obj
    if not pyfuncitem.config.pluginmanager.hasplugin("timeout") and not hasattr(
        original, "hypothesis"
    ):
        marker = pyfuncitem.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker and marker.args else DEFAULT_TIMEOUT
        pyfuncitem.obj = _with_timeout(original, seconds)
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original


def _with_timeout(f: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    from twisted.internet import reactor

    def bounded(**kwargs: Any) -> Any:
        result = f(**kwargs)
        if isinstance(result, Deferred) or hasattr(result, "__await__"):
            return ensureDeferred(result).addTimeout(seconds, reactor)
        return result

    mark = getattr(f, "_pytest_twisted_mark", None)
    if mark is not None:
        bounded._pytest_twisted_mark = "async_test"  # type: ignore[attr-defined]
    return bounded


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(autouse=True)
def _trial_working_directory(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """
    Run trial TestCases in a scratch directory, as trial does (``_trial_temp``), so that
    ``self.mktemp()`` paths do not land in the repository.
    """
    from twisted.trial.unittest import SynchronousTestCase

    if isinstance(request.instance, SynchronousTestCase):
        monkeypatch.chdir(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def reactor() -> Any:
    """The global Twisted reactor (the one pytest-twisted installed)."""
    from twisted.internet import reactor

    return reactor


@pytest_twisted.async_yield_fixture
async def mailbox(reactor: Any) -> AsyncIterator[MailboxServer]:
    """A real mailbox server on 127.0.0.1 for one test."""
    server = await start_mailbox_server(reactor)
    yield server
    await server.stop()


@pytest_twisted.async_yield_fixture
async def transit_relay(reactor: Any) -> AsyncIterator[TransitRelay]:
    """A real transit relay on 127.0.0.1 for one test."""
    relay = await start_transit_relay(reactor)
    yield relay
    await relay.stop()
