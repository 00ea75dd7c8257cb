"""``dilation:...:pairing=PATH``: the endpoints' wormhole as a paired wormhole.

Layer: application edge (over :mod:`txdilation.pairing`). A :class:`SharedPairing` is the
:class:`~txdilation.endpoints.shared.SharedWormhole` of endpoints naming a pairing file: a
:class:`~txdilation.pairing.paired_wormhole.PairedWormhole` stands in for the wormhole and its
dilation, so a listening port serves every meeting (it comes back by itself after a restart of
either side) and a client's ``connect()`` uses the current one. The first time (no file yet) the
code is allocated or given as for any ``dilation:`` endpoint (``code-file`` too); afterwards no code
is used (one in the string is ignored, and the log says so).

Invariants: as :class:`~txdilation.endpoints.shared.SharedWormhole`'s; ``code_known`` fires with
the code the first time, and at once with ``paired`` once the file exists; each meeting's
status feeds a fresh ``LinkObserver``; a fatal pairing error is logged once and ends the
wormhole like any other.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.endpoints.shared import NAMESPACE, SharedWormhole, _write_code
from txdilation.reporting.status_events import KINDS

__all__ = ["SharedPairing"]

_log = Logger(namespace=NAMESPACE)


class SharedPairing(SharedWormhole):
    """See the module docstring."""

    def _open(self) -> Deferred[str]:
        from txdilation.pairing.paired_wormhole import PairedWormhole
        from txdilation.pairing.pairing_options import PairingOptions
        from txdilation.pairing.store import PairingStore
        from txdilation.session.observe import LinkObserver

        settings = self.settings
        assert settings.pairing is not None
        exists = PairingStore(settings.pairing).exists()
        if exists and settings.code is not None:
            _log.info(
                "pairing file {path} exists: the code in the endpoint string is not used",
                path=settings.pairing,
            )
        options = PairingOptions(
            path=settings.pairing,
            appid=settings.appid,
            mailbox=settings.mailbox,
            code=settings.code,
            allocate_code=settings.code is None,
            relay=(settings.relay,) if settings.relay else (),
            no_listen=settings.no_listen,
            ping_interval=settings.ping_interval,
            semantics="twisted",
        )
        self._code_waiter: Deferred[str] = Deferred()

        def status() -> tuple[Any, Any]:
            observer = LinkObserver(self.writer, self._rtt)
            self.observer = observer
            return (observer.wormhole_status, observer.dilation_status)

        paired = PairedWormhole(
            self.reactor, options, on_event=self._event, status=status, on_failed=self._failed
        )
        self.wormhole = self.dilated = paired
        paired.start()
        return succeed("paired") if exists else self._code_waiter

    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        if kind in KINDS:
            self.writer.emit(kind, **fields)
        if kind == "code" and not self._code_waiter.called:
            code = str(fields["code"])
            self.code = code
            if self.settings.code_file:
                _write_code(self.settings.code_file, code)
                _log.info("wormhole code written to {path}", path=self.settings.code_file)
            self._code_waiter.callback(code)

    def _failed(self, failure: Failure) -> None:
        if not self._code_waiter.called:
            self._code_waiter.errback(failure)
            return  # code_known's errback ends it (SharedWormhole._failed_early)
        self._end_with(failure)
