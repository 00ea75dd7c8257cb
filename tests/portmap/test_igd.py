"""UPnP IGD: the device description, SOAP requests and answers."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap import igd

LOCATION = "http://192.168.1.1:5000/rootDesc.xml"


def description(*services: tuple[str, str]) -> bytes:
    """A device description listing ``(serviceType, controlURL)`` services."""
    listed = "".join(
        f"<service><serviceType>{kind}</serviceType><controlURL>{url}</controlURL></service>"
        for kind, url in services
    )
    return (
        '<?xml version="1.0"?><root xmlns="urn:schemas-upnp-org:device-1-0"><device>'
        f"<deviceList><device><serviceList>{listed}</serviceList></device></deviceList>"
        "</device></root>"
    ).encode()


V1 = "urn:schemas-upnp-org:service:WANIPConnection:1"
V2 = "urn:schemas-upnp-org:service:WANIPConnection:2"


class DescriptionTests(SynchronousTestCase):
    """Which service, which control URL."""

    def test_prefers_version_2(self) -> None:
        """WANIPConnection:2 is taken over :1; a relative control URL is resolved against the
        description's location."""
        service = igd.find_service(description((V1, "/ctl/v1"), (V2, "/ctl/IPConn")), LOCATION)
        self.assertEqual(service, igd.Service(V2, "http://192.168.1.1:5000/ctl/IPConn"))
        self.assertEqual(service.version, 2)

    def test_refused(self) -> None:
        """No mapping service, a control URL on another host, or no XML: IgdError."""
        cases = [
            description(("urn:schemas-upnp-org:service:Layer3Forwarding:1", "/ctl/L3F")),
            description((V1, "http://192.168.1.99/ctl")),
            b"<root><unclosed></root>",
            b"<a>" + b"x" * igd.MAX_DOCUMENT + b"</a>",
        ]
        for document in cases:
            with self.subTest(document=document[:60]), self.assertRaises(igd.IgdError):
                igd.find_service(document, LOCATION)


class SoapTests(SynchronousTestCase):
    """Actions and their answers."""

    SERVICE = igd.Service(V2, "http://192.168.1.1:5000/ctl/IPConn")

    def test_request(self) -> None:
        """The SOAPAction header names service#action; arguments are in order and escaped."""
        headers, body = igd.soap_request(
            self.SERVICE,
            "AddPortMapping",
            {"NewExternalPort": 1, "NewPortMappingDescription": "a<b"},
        )
        self.assertEqual(headers["SOAPAction"], f'"{V2}#AddPortMapping"')
        self.assertIn(b"<NewExternalPort>1</NewExternalPort>", body)
        self.assertIn(b"a&lt;b", body)

    def test_answer(self) -> None:
        """An action's answer gives its output arguments."""
        document = (
            b'<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>'
            b'<u:GetExternalIPAddressResponse xmlns:u="x"><NewExternalIPAddress>198.20.1.2'
            b"</NewExternalIPAddress></u:GetExternalIPAddressResponse></s:Body></s:Envelope>"
        )
        answer = igd.parse_soap_response(document, "GetExternalIPAddress")
        self.assertEqual(answer, {"NewExternalIPAddress": "198.20.1.2"})

    def test_fault(self) -> None:
        """A fault raises SoapFault with the UPnP error code."""
        document = (
            b'<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><s:Fault>'
            b"<faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail>"
            b'<UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>718</errorCode>'
            b"<errorDescription>ConflictInMappingEntry</errorDescription></UPnPError></detail>"
            b"</s:Fault></s:Body></s:Envelope>"
        )
        with self.assertRaises(igd.SoapFault) as caught:
            igd.parse_soap_response(document, "AddPortMapping")
        self.assertEqual(caught.exception.code, igd.CONFLICT_IN_MAPPING)
