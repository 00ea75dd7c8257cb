"""The PortMapper: the protocols' order, renewals, deletion, silence and network changes, on a
Clock with clients that answer as each test says."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap.gateway import Gateway
from txdilation.portmap.mapper import PortMapper
from txdilation.portmap.mapping import (
    MappingProtocol,
    MappingRefused,
    NoService,
    PortMapping,
    renew_at,
)

GATEWAY = Gateway("192.168.1.1", "192.168.1.2")
Answer = Callable[[int, PortMapping | None], "PortMapping | Exception | Deferred[PortMapping]"]


class ScriptedClient:
    """A protocol's client answering each map() with ``answer(port, previous)``."""

    def __init__(self, protocol: MappingProtocol, clock: Clock, answer: Answer | None) -> None:
        self.protocol = protocol
        self._clock = clock
        self._answer = answer
        self.asked: list[tuple[int, PortMapping | None]] = []
        self.deleted: list[PortMapping] = []

    def granted(
        self, port: int, external: str = "198.20.1.2", lifetime: float = 100.0
    ) -> PortMapping:
        return PortMapping(
            self.protocol,
            GATEWAY.local_address,
            port,
            external,
            port,
            lifetime,
            self._clock.seconds(),
        )

    async def map(
        self, gateway: Gateway, internal_port: int, lifetime: int, previous: PortMapping | None
    ) -> PortMapping:
        self.asked.append((internal_port, previous))
        if self._answer is None:
            raise NoService("nothing answers")
        result = self._answer(internal_port, previous)
        if isinstance(result, Deferred):
            return await result
        if isinstance(result, Exception):
            raise result
        return result

    async def unmap(self, gateway: Gateway, mapping: PortMapping) -> None:
        self.deleted.append(mapping)


class Changes:
    """An observer keeping (change, protocol) pairs."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def port_mapping_changed(self, change: str, mapping: PortMapping | None) -> None:
        self.seen.append((change, mapping.protocol.value if mapping else None))


class MapperTests(SynchronousTestCase):
    """See the module docstring."""

    def build(
        self,
        pcp: Answer | None = None,
        natpmp: Answer | None = None,
        upnp: Answer | None = None,
        gateway: Gateway | None = GATEWAY,
    ) -> tuple[PortMapper, list[ScriptedClient], Changes, Clock]:
        clock = Clock()
        clients = [
            ScriptedClient(MappingProtocol.PCP, clock, pcp),
            ScriptedClient(MappingProtocol.NAT_PMP, clock, natpmp),
            ScriptedClient(MappingProtocol.UPNP_IGD, clock, upnp),
        ]
        changes = Changes()
        mapper = PortMapper(clock, observer=changes, gateway=lambda: gateway, clients=clients)
        return mapper, clients, changes, clock

    def test_fallback_order(self) -> None:
        """PCP first, then NAT-PMP (here refused), then UPnP IGD, which maps: the listener
        hears the mapping once, the observer 'mapped'."""
        refused = MappingRefused(MappingProtocol.NAT_PMP, 2, "not authorized")
        mapper, clients, changes, _ = self.build(
            natpmp=lambda p, prev: refused, upnp=lambda p, prev: clients[2].granted(p)
        )
        heard: list[PortMapping] = []
        mapper.map(40000, heard.append)
        self.assertEqual([len(c.asked) for c in clients], [1, 1, 1])
        self.assertEqual([m.protocol for m in heard], [MappingProtocol.UPNP_IGD])
        self.assertEqual(changes.seen, [("mapped", "upnp-igd")])
        self.assertEqual(mapper.current, heard[0])

    def test_first_protocol_wins(self) -> None:
        """When PCP maps, the others are never asked."""
        mapper, clients, _, _ = self.build(pcp=lambda p, prev: clients[0].granted(p))
        mapper.map(40000, lambda m: None)
        self.assertEqual([len(c.asked) for c in clients], [1, 0, 0])

    def test_renewal(self) -> None:
        """Half-way through the lease the same protocol renews with the mapping it holds; the
        listener hears again only if the external port changed."""
        ports = iter([40000, 40000, 41000])
        mapper, clients, changes, clock = self.build(
            pcp=lambda p, prev: PortMapping(
                MappingProtocol.PCP,
                "192.168.1.2",
                p,
                "198.20.1.2",
                next(ports),
                100.0,
                clock.seconds(),
            )
        )
        heard: list[int] = []
        mapper.map(40000, lambda m: heard.append(m.external_port))
        first = mapper.current
        assert first is not None
        clock.advance(renew_at(first))
        self.assertIs(clients[0].asked[-1][1], first)
        clock.advance(50)
        self.assertEqual(heard, [40000, 41000])
        self.assertEqual(changes.seen, [("mapped", "pcp"), ("renewed", "pcp"), ("renewed", "pcp")])

    def test_failed_renewal_starts_over(self) -> None:
        """A renewal that fails loses the mapping ('lost') and the protocols are tried again
        from the first."""
        answers = iter([None, NoService("gone")])

        def pcp(port: int, previous: PortMapping | None) -> PortMapping | Exception:
            answer = next(answers, None)
            return answer if answer is not None else clients[0].granted(port)

        mapper, clients, changes, clock = self.build(pcp=pcp)
        mapper.map(40000, lambda m: None)
        clock.advance(50)
        self.assertEqual(changes.seen, [("mapped", "pcp"), ("lost", "pcp"), ("mapped", "pcp")])

    def test_release_and_stop_delete(self) -> None:
        """Releasing the port deletes its mapping ('deleted'); stop fires once the deletion is
        done, and nothing is mapped after it."""
        mapper, clients, changes, _ = self.build(pcp=lambda p, prev: clients[0].granted(p))
        mapper.map(40000, lambda m: None)
        mapper.release(40001)  # another port: nothing happens
        self.assertIsNotNone(mapper.current)
        mapper.release(40000)
        self.assertEqual([m.internal_port for m in clients[0].deleted], [40000])
        mapper.map(40002, lambda m: None)
        done = mapper.stop()
        self.successResultOf(done)
        self.assertEqual([m.internal_port for m in clients[0].deleted], [40000, 40002])
        mapper.map(40003, lambda m: None)
        self.assertEqual(len(clients[0].asked), 2)
        self.assertEqual([c for c, _ in changes.seen], ["mapped", "deleted", "mapped", "deleted"])

    def test_silent_gateway_asked_once(self) -> None:
        """A gateway that answers no protocol is 'unavailable' and not asked again for the
        next ports, until the network changes."""
        mapper, clients, changes, _ = self.build()
        mapper.map(40000, lambda m: None)
        mapper.map(40001, lambda m: None)
        self.assertEqual([len(c.asked) for c in clients], [1, 1, 1])
        self.assertEqual(changes.seen, [("unavailable", None)])
        mapper.network_changed()
        self.assertEqual([len(c.asked) for c in clients], [2, 2, 2])

    def test_no_gateway_costs_nothing(self) -> None:
        """Without a gateway (or not a home router's), no client is asked."""
        mapper, clients, changes, _ = self.build(gateway=None)
        mapper.map(40000, lambda m: None)
        self.assertEqual([len(c.asked) for c in clients], [0, 0, 0])
        self.assertEqual(changes.seen, [])

    def test_mapping_behind_another_nat(self) -> None:
        """A mapping to a private address (the gateway is behind another NAT) is deleted and
        never advertised."""
        mapper, clients, changes, _ = self.build(
            pcp=lambda p, prev: clients[0].granted(p, external="10.0.0.7")
        )
        heard: list[PortMapping] = []
        mapper.map(40000, heard.append)
        self.assertEqual(heard, [])
        self.assertEqual(len(clients[0].deleted), 1)
        self.assertEqual(changes.seen, [("unavailable", None)])

    def test_late_mapping_deleted(self) -> None:
        """A mapping granted after its port was released is deleted at once, unheard."""
        pending: Deferred[PortMapping] = Deferred()
        mapper, clients, _, _ = self.build(pcp=lambda p, prev: pending)
        heard: list[PortMapping] = []
        mapper.map(40000, heard.append)
        mapper.release(40000)
        pending.callback(clients[0].granted(40000))
        self.assertEqual(heard, [])
        self.assertEqual(len(clients[0].deleted), 1)
        self.assertIsNone(mapper.current)

    def test_stop_cancels_an_attempt(self) -> None:
        """Stopping while an attempt waits cancels it: stop fires at once."""
        mapper, _, _, _ = self.build(pcp=lambda p, prev: Deferred())
        mapper.map(40000, lambda m: None)
        self.successResultOf(mapper.stop())

    def test_network_change_forgets_and_maps_again(self) -> None:
        """A network change forgets the mapping ('forgotten', no deletion: it may lead nowhere)
        and maps the wanted port again."""
        mapper, clients, changes, _ = self.build(pcp=lambda p, prev: clients[0].granted(p))
        heard: list[PortMapping] = []
        mapper.map(40000, heard.append)
        mapper.network_changed()
        self.assertEqual(changes.seen, [("mapped", "pcp"), ("forgotten", "pcp"), ("mapped", "pcp")])
        self.assertEqual(clients[0].deleted, [])
        self.assertEqual(len(heard), 2)

    def test_same_port_again(self) -> None:
        """Asking again for the port held tells the new listener at once, without asking."""
        mapper, clients, _, _ = self.build(pcp=lambda p, prev: clients[0].granted(p))
        mapper.map(40000, lambda m: None)
        heard: list[PortMapping] = []
        mapper.map(40000, heard.append)
        self.assertEqual(len(heard), 1)
        self.assertEqual(len(clients[0].asked), 1)
