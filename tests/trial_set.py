"""
The tests CI also runs under trial, and what keeps that list honest.

Layer: test infrastructure. Every test is a trial ``TestCase`` (or a pytest-only function), so
both runners run the whole suite: ``python -m pytest`` and ``python -m twisted.trial tests``.
CI (README's test command) runs everything once under pytest, then
``python -m twisted.trial tests.trial_set``: trial loads this module's ``testSuite()``, the
tests named in ``TRIAL``, a small fixed set with a representative of every kind of test in the
suite (see ``KINDS``). Running 900 tests twice showed no more than that, at twice the cost.

Every test module is either in ``TRIAL`` (some of its tests run under trial) or in ``COVERED``
with the kinds of test it holds, each of which has a representative in ``TRIAL``.
``tests/test_trial_set.py`` checks that: a new module must be entered in one of the two, a
module whose kinds change (it starts to use namespaces, say) must be entered again, a kind with
no representative under trial fails, and so does a name in ``TRIAL`` that no longer loads.
``kinds_of`` reads a module's kinds from its test classes (trial ``TestCase`` or synchronous,
servers or namespaces mixed in, hypothesis-driven methods) and its source (what it starts or
imports).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from twisted.trial.runner import TestLoader
from twisted.trial.unittest import SynchronousTestCase, TestCase

TESTS_DIR = Path(__file__).resolve().parent

KINDS: Mapping[str, str] = {
    "unit": "synchronous tests: pure functions, I/O-free cores, a Clock or in-memory transports",
    "hypothesis": "property tests driven by hypothesis",
    "reactor": "trial TestCases whose tests return Deferreds or coroutines on the real reactor",
    "servers": "the real mailbox server and transit relay, in-process on 127.0.0.1",
    "processes": "child processes: peers, fowld, twistd, command-line tools",
    "stock": "stock magic-wormhole's dilation, in-process or as the other peer",
    "dropin": "txdilation.install() / the drop-in under stock's API",
    "namespaces": "Linux network namespaces the test builds",
    "spark": "the analytics on a local SparkSession (Java)",
    "browser": "the analytics report in headless Chromium (Playwright)",
    "pytest-only": "module-level pytest functions and fixtures (trial never runs them)",
}

#: What a module's source shows of each kind that its classes do not.
_SOURCE_SIGNS: Mapping[str, str] = {
    "servers": r"\b(RealServersMixin|start_mailbox_server|start_transit_relay|start_servers)\b",
    "processes": (
        r"\b(run_peer_pair|PeerPair|spawnProcess|getProcessOutput\w*|Fowld|run_semantics_pair)\b"
        r"|\bsubprocess\.(run|Popen|check_output|check_call)\b"
    ),
    "stock": r"\"stock\"|\bwormhole\._dilation\b|\bSTOCK_LEADS",
    "dropin": r"\btxdilation\.(install|dropin)\b|\bdropin\b",
    "namespaces": r"\b(require_namespaces|NamespaceTestCase)\b",
    "hypothesis": r"@given\(",
    "spark": r"\b(pyspark|_spark)\b",
    "browser": r"\b(playwright|_browser)\b",
}


def kinds(names: str) -> frozenset[str]:
    """A set of kinds from their names, separated by spaces."""
    return frozenset(names.split())


#: The tests run under trial in CI: (name as trial takes it, the kinds it stands for).
TRIAL: tuple[tuple[str, frozenset[str]], ...] = (
    # this check itself
    ("tests.test_trial_set", kinds("unit")),
    # a core on a Clock, hypothesis-driven
    ("tests.path.test_liveness", kinds("hypothesis unit")),
    # records against stock's own encoder, in-process
    ("tests.wire.test_records", kinds("hypothesis stock unit")),
    # the real servers, trial waiting inside pytest-twisted's reactor, peers killed at timeouts
    ("tests.test_harness", kinds("processes reactor servers unit")),
    # two real Managers over loopback TCP, Deferred-returning tests
    ("tests.mailbox.test_manager.InMemoryMailboxTests", kinds("reactor")),
    # stock peer processes in both roles, direct and through the relay
    (
        "tests.test_interop.TxdilationLeftStockRight.test_echo_direct_server_leads",
        kinds("processes reactor servers stock"),
    ),
    (
        "tests.test_interop.StockLeftTxdilationRight.test_echo_relay_only_client_leads_half_close",
        kinds("processes reactor servers stock"),
    ),
    # a namespace topology with the servers and peers inside it (coroutine test)
    (
        "tests.test_netns_support.PeersInNamespacesTests"
        ".test_txdilation_peers_dilate_through_namespaced_servers",
        kinds("namespaces processes reactor servers"),
    ),
    # the drop-in: install/uninstall under stock's API, in this process and in a child
    ("tests.test_dropin.InstallTests", kinds("dropin processes stock")),
    # txdilation exec: every Python process under it proves it dilates through txdilation
    ("tests.test_exec.ProofTests", kinds("processes stock unit")),
    # the analytics on a local SparkSession, and the report's browser check
    ("tests.analytics.test_golden", kinds("spark unit")),
    ("tests.analytics.test_report.BrowserTests.test_errors_are_caught", kinds("browser")),
)

#: Every other test module, with the kinds of test it holds (as ``kinds_of`` reads them).
COVERED: Mapping[str, frozenset[str]] = {
    "tests.analytics.test_captured": kinds("processes reactor servers spark stock"),
    "tests.analytics.test_cli": kinds("processes spark unit"),
    "tests.analytics.test_cluster": kinds("processes spark unit"),
    "tests.analytics.test_demo_report": kinds("processes spark unit"),
    "tests.analytics.test_increments": kinds("spark unit"),
    "tests.analytics.test_report_render": kinds("spark unit"),
    "tests.analytics.test_synth": kinds("reactor servers spark unit"),
    "tests.durable.test_acks": kinds("unit"),
    "tests.durable.test_inbound": kinds("hypothesis unit"),
    "tests.durable.test_inbound_lifecycle": kinds("hypothesis unit"),
    "tests.durable.test_outbound": kinds("hypothesis unit"),
    "tests.durable.test_replay_batches": kinds("unit"),
    "tests.durable.test_routes": kinds("hypothesis unit"),
    "tests.durable.test_sent_log": kinds("unit"),
    "tests.durable.test_window": kinds("unit"),
    "tests.link.test_connection": kinds("reactor servers unit"),
    "tests.link.test_connection_lifecycle": kinds("unit"),
    "tests.link.test_framer": kinds("hypothesis stock unit"),
    "tests.link.test_noise": kinds("hypothesis stock unit"),
    "tests.link.test_security": kinds("reactor"),
    "tests.link.test_websocket": kinds("reactor servers"),
    "tests.mailbox.test_absence": kinds("unit"),
    "tests.mailbox.test_dilated": kinds("unit"),
    "tests.mailbox.test_dilator": kinds("unit"),
    "tests.mailbox.test_losses": kinds("unit"),
    "tests.mailbox.test_manager_core": kinds("unit"),
    "tests.mailbox.test_port_mapping": kinds("unit"),
    "tests.mailbox.test_manager_lifecycle": kinds("unit"),
    "tests.mailbox.test_dilate_messages": kinds("hypothesis unit"),
    "tests.mailbox.test_path_upgrade": kinds("unit"),
    "tests.mailbox.test_peer_departure": kinds("reactor unit"),
    "tests.mailbox.test_peer_messages": kinds("unit"),
    "tests.mailbox.test_selection_reports": kinds("unit"),
    "tests.mailbox.test_standby": kinds("unit"),
    "tests.mailbox.test_status_reporter": kinds("unit"),
    "tests.mailbox.test_welcome": kinds("unit"),
    "tests.pairing.test_derive": kinds("hypothesis unit"),
    "tests.pairing.test_handshake": kinds("unit"),
    "tests.pairing.test_hello": kinds("hypothesis unit"),
    "tests.pairing.test_lobby": kinds("unit"),
    "tests.pairing.test_pairing_messages": kinds("unit"),
    "tests.pairing.test_paired_wormhole": kinds("reactor servers"),
    "tests.pairing.test_plan": kinds("unit"),
    "tests.pairing.test_ratchet": kinds("unit"),
    "tests.pairing.test_record": kinds("hypothesis unit"),
    "tests.pairing.test_store": kinds("unit"),
    "tests.pairing.test_warnings": kinds("unit"),
    "tests.portmap.test_gateway": kinds("unit"),
    "tests.portmap.test_igd": kinds("unit"),
    "tests.portmap.test_mapper": kinds("unit"),
    "tests.portmap.test_natpmp": kinds("hypothesis unit"),
    "tests.portmap.test_pcp": kinds("hypothesis unit"),
    "tests.portmap.test_ssdp": kinds("unit"),
    "tests.portmap.test_udp": kinds("reactor"),
    "tests.selection.test_addresses": kinds("unit"),
    "tests.selection.test_advertise": kinds("unit"),
    "tests.selection.test_attempts": kinds("unit"),
    "tests.selection.test_connector": kinds("unit"),
    "tests.selection.test_connector_upgrade": kinds("unit"),
    "tests.path.test_dead_path": kinds("unit"),
    "tests.selection.test_dial_endpoint": kinds("unit"),
    "tests.selection.test_dialing": kinds("unit"),
    "tests.selection.test_hints": kinds("hypothesis unit"),
    "tests.selection.test_listen_port": kinds("reactor unit"),
    "tests.selection.test_listener": kinds("hypothesis reactor unit"),
    "tests.path.test_netwatch": kinds("namespaces processes reactor unit"),
    "tests.selection.test_probe": kinds("unit"),
    "tests.selection.test_punch": kinds("reactor unit"),
    "tests.selection.test_punch_dial": kinds("reactor"),
    "tests.selection.test_punch_schedule": kinds("unit"),
    "tests.selection.test_race": kinds("unit"),
    "tests.selection.test_rekindle": kinds("unit"),
    "tests.selection.test_relays": kinds("unit"),
    "tests.path.test_selected_link": kinds("unit"),
    "tests.path.test_tcp_info": kinds("unit"),
    "tests.selection.test_upgrade": kinds("hypothesis unit"),
    "tests.session.test_config": kinds("unit"),
    "tests.session.test_log": kinds("reactor servers"),
    "tests.session.test_paired_session": kinds("processes reactor unit"),
    "tests.session.test_pairing_attacks": kinds("reactor"),
    "tests.session.test_pairing_processes": kinds("reactor stock"),
    "tests.session.test_plugin": kinds("dropin processes unit"),
    "tests.session.test_process": kinds("unit"),
    "tests.session.test_processes": kinds("processes reactor servers stock"),
    "tests.session.test_service": kinds("dropin reactor servers unit"),
    "tests.session.test_splice": kinds("unit"),
    "tests.session.test_status": kinds("unit"),
    "tests.session.test_systemd": kinds("dropin processes reactor servers unit"),
    "tests.session.test_user_view": kinds("processes reactor unit"),
    "tests.subchannels.test_app_endpoints": kinds("unit"),
    "tests.subchannels.test_multiplexer": kinds("hypothesis unit"),
    "tests.subchannels.test_subchannel": kinds("hypothesis unit"),
    "tests.subchannels.test_subchannel_lifecycle": kinds("hypothesis unit"),
    "tests.subchannels.test_unanswered": kinds("unit"),
    "tests.test_benchmarks": kinds("processes stock unit"),
    "tests.test_careless_user": kinds("processes unit"),
    "tests.test_cli": kinds("dropin processes reactor servers unit"),
    "tests.test_docs_site": kinds("dropin processes servers unit"),
    "tests.test_durability": kinds("processes reactor servers stock"),
    "tests.test_endpoints": kinds("reactor servers unit"),
    "tests.test_exactly_once": kinds("hypothesis unit"),
    "tests.test_errors": kinds("stock unit"),
    "tests.test_example_app": kinds("unit"),
    "tests.test_examples": kinds("processes reactor servers"),
    "tests.test_exec_apps": kinds("processes reactor servers stock"),
    "tests.test_faults": kinds("reactor unit"),
    "tests.test_figures": kinds("unit"),
    "tests.test_flood": kinds("namespaces reactor"),
    "tests.test_fowl": kinds("dropin processes reactor servers stock unit"),
    "tests.test_fuzz": kinds("hypothesis unit"),
    "tests.test_hostile_listener": kinds("reactor unit"),
    "tests.test_hostile_mailbox": kinds("hypothesis reactor unit"),
    "tests.test_hostile_peer": kinds("reactor"),
    "tests.test_idioms": kinds("unit"),
    "tests.test_logs": kinds("unit"),
    "tests.test_machines": kinds("hypothesis reactor unit"),
    "tests.test_memory": kinds("processes reactor servers"),
    "tests.test_mixed_pairs": kinds("reactor servers stock unit"),
    "tests.test_peer_stream": kinds("unit"),
    "tests.test_quality": kinds("processes unit"),
    "tests.test_portmap": kinds("namespaces reactor servers stock"),
    "tests.test_reach": kinds("namespaces reactor servers stock"),
    "tests.test_recovery": kinds("namespaces reactor"),
    "tests.test_relay_stuck_link": kinds("reactor servers"),
    "tests.test_release": kinds("processes unit"),
    "tests.test_relays": kinds("namespaces processes reactor servers stock"),
    "tests.test_semantics": kinds("dropin reactor servers stock"),
    "tests.test_servers_doc": kinds("processes reactor"),
    "tests.test_settings_path": kinds("dropin unit"),
    "tests.test_soak": kinds("reactor servers"),
    "tests.test_state_diagrams": kinds("processes unit"),
    "tests.test_stock_interop_harness": kinds("processes reactor servers stock"),
    "tests.test_stops": kinds("reactor servers"),
    "tests.test_telemetry": kinds("hypothesis unit"),
    "tests.test_telemetry_emission": kinds("dropin reactor servers unit"),
    "tests.test_tiers": kinds("dropin unit"),
    "tests.test_upgrade": kinds("namespaces reactor"),
    "tests.testing.test_fakes": kinds("unit"),
    "tests.testing.test_memory": kinds("reactor unit"),
    "tests.wire.test_contracts": kinds("unit"),
    "tests.wire.test_encode": kinds("hypothesis unit"),
    "tests.wire.test_dilation_errors": kinds("unit"),
    "tests.wire.test_keys": kinds("hypothesis unit"),
    "tests.wire.test_limits": kinds("hypothesis unit"),
    "tests.wire.test_machines": kinds("unit"),
    "tests.wire.test_reasons": kinds("unit"),
    "tests.wire.test_timer": kinds("unit"),
    "tests.wire.test_waiting": kinds("hypothesis unit"),
}


def testSuite() -> object:  # trial looks for this name
    """The suite trial runs for ``python -m twisted.trial tests.trial_set``."""
    return TestLoader().loadByNames([name for name, _ in TRIAL])


def all_test_modules() -> list[str]:
    """The dotted names of every ``test_*.py`` module under tests/, sorted."""
    root = TESTS_DIR.parent
    return sorted(
        ".".join(path.relative_to(root).with_suffix("").parts)
        for path in TESTS_DIR.rglob("test_*.py")
    )


def module_of(name: str) -> str:
    """The test module a ``TRIAL`` name belongs to (the name itself, or its module)."""
    modules = all_test_modules()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    raise LookupError(f"{name} is in no test module under tests/")


@functools.cache
def kinds_of(module_name: str) -> frozenset[str]:
    """The kinds of test (keys of ``KINDS``) that a test module holds."""
    module = importlib.import_module(module_name)
    found = set(_class_kinds(module))
    source = inspect.getsource(module)
    found.update(kind for kind, sign in _SOURCE_SIGNS.items() if re.search(sign, source))
    return frozenset(found)


def _class_kinds(module: ModuleType) -> set[str]:
    found: set[str] = set()
    for value in vars(module).values():
        if inspect.isfunction(value) and value.__name__.startswith("test_"):
            if value.__module__ == module.__name__:
                found.add("pytest-only")
            continue
        if getattr(value, "_pytestfixturefunction", None) or _is_fixture(value):
            found.add("pytest-only")
            continue
        if not (inspect.isclass(value) and issubclass(value, SynchronousTestCase)):
            continue
        if value.__module__ != module.__name__ or not _has_tests(value):
            continue
        found.add("reactor" if issubclass(value, TestCase) else "unit")
        if any(
            hasattr(getattr(value, name), "hypothesis")
            for name in dir(value)
            if name.startswith("test")
        ):
            found.add("hypothesis")
    return found


def _is_fixture(value: object) -> bool:
    return type(value).__name__ == "FixtureFunctionDefinition"


def _has_tests(cls: type) -> bool:
    return any(name.startswith("test") and callable(getattr(cls, name)) for name in dir(cls))
