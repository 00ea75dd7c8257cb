"""``txdilation demo``: two session processes forward a local service, with link cuts.

:mod:`.runner` runs it (:func:`run_demo`: the servers, the sessions, the cuts, the summary);
:mod:`.exchange` is its traffic protocol (deterministic data out, SHA-256 of what comes in),
shared with the tests.
"""

from __future__ import annotations

from txdilation.demo.runner import APPID, run_demo

__all__ = ["APPID", "run_demo"]
