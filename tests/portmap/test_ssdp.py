"""SSDP: the M-SEARCH and the answers accepted."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap import ssdp

ANSWER = (
    "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\n"
    "ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n"
    "LOCATION: http://192.168.1.1:5000/rootDesc.xml\r\n\r\n"
)


class SsdpTests(SynchronousTestCase):
    """Search and answers."""

    def test_search(self) -> None:
        """The M-SEARCH names the group, ssdp:discover and the IGD search target."""
        text = ssdp.search_request().decode()
        self.assertTrue(text.startswith("M-SEARCH * HTTP/1.1\r\n"))
        self.assertIn('MAN: "ssdp:discover"', text)
        self.assertIn(f"ST: {ssdp.SEARCH_TARGET}", text)
        self.assertTrue(text.endswith("\r\n\r\n"))

    def test_location(self) -> None:
        """An answer from the gateway gives its description URL."""
        location = ssdp.parse_search_response(ANSWER.encode(), "192.168.1.1")
        self.assertEqual(location, "http://192.168.1.1:5000/rootDesc.xml")

    def test_refused(self) -> None:
        """A location on another host than the sender's, another scheme, no location, not a
        200 answer, or an oversized one: SsdpError."""
        cases = [
            (ANSWER, "192.168.1.7"),
            (ANSWER.replace("http://", "https://"), "192.168.1.1"),
            (ANSWER.replace("LOCATION", "X-LOC"), "192.168.1.1"),
            (ANSWER.replace("200 OK", "404 Not Found"), "192.168.1.1"),
            (ANSWER + "X" * 5000, "192.168.1.1"),
        ]
        for text, sender in cases:
            with self.subTest(text=text[:40], sender=sender), self.assertRaises(ssdp.SsdpError):
                ssdp.parse_search_response(text.encode(), sender)
