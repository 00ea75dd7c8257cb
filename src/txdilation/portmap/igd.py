"""Port mapping: a UPnP Internet Gateway Device's description and SOAP actions (I/O-free).

:func:`find_service` reads a device description (XML) for the WAN connection service that maps
ports (``WANIPConnection`` 2 or 1, else ``WANPPPConnection`` 1) and resolves its control URL;
:func:`soap_request` builds an action's headers and body; :func:`parse_soap_response` reads
the action's output arguments or raises :class:`SoapFault` with the UPnP error code.

Invariants: documents are parsed only when at most :data:`MAX_DOCUMENT` bytes (the glue reads
no more); XML namespaces are ignored when matching element names (devices differ there); a
control URL is only accepted on the description's own host (a device cannot point us at a
third host); argument values are XML-escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from txdilation.errors import ProtocolViolation

__all__ = [
    "MAX_DOCUMENT",
    "SERVICE_TYPES",
    "IgdError",
    "Service",
    "SoapFault",
    "find_service",
    "parse_soap_response",
    "soap_request",
]

MAX_DOCUMENT = 65536
SERVICE_TYPES = (
    "urn:schemas-upnp-org:service:WANIPConnection:2",
    "urn:schemas-upnp-org:service:WANIPConnection:1",
    "urn:schemas-upnp-org:service:WANPPPConnection:1",
)

#: UPnP error codes the client acts on (IGD WANIPConnection:2, section 2.4)
INVALID_ACTION = 401
CONFLICT_IN_MAPPING = 718
ONLY_PERMANENT_LEASES = 725


class IgdError(ValueError, ProtocolViolation):
    """A description or answer that cannot be used."""


class SoapFault(IgdError):
    """The device refused an action (``code``: the UPnP error code, 0 when it gave none)."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(f"UPnP error {code}: {description}")
        self.code = code


@dataclass(frozen=True, slots=True)
class Service:
    """A WAN connection service: its type (the SOAP namespace) and control URL."""

    service_type: str
    control_url: str

    @property
    def version(self) -> int:
        return int(self.service_type.rsplit(":", 1)[1])


def _name(element: ElementTree.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def _parse(document: bytes) -> ElementTree.Element:
    if len(document) > MAX_DOCUMENT:
        raise IgdError("UPnP document too long")
    try:
        return ElementTree.fromstring(document)
    except ElementTree.ParseError as e:
        raise IgdError(f"UPnP document is not XML: {e}") from None


def find_service(description: bytes, location: str) -> Service:
    """The port-mapping service of the device described at ``location``.

    :raises IgdError: not XML, no such service, or a control URL on another host.
    """
    root = _parse(description)
    base = location
    services: dict[str, str] = {}
    for element in root.iter():
        if _name(element) == "URLBase" and element.text:
            base = element.text.strip()
        if _name(element) != "service":
            continue
        fields = {_name(child): (child.text or "").strip() for child in element}
        kind, control = fields.get("serviceType", ""), fields.get("controlURL", "")
        if kind in SERVICE_TYPES and control:
            services.setdefault(kind, control)
    for kind in SERVICE_TYPES:
        if kind in services:
            url = urljoin(base, services[kind])
            if urlsplit(url).scheme != "http" or urlsplit(url).netloc != urlsplit(location).netloc:
                raise IgdError(f"control URL {url[:80]!r} not on the device's host")
            return Service(kind, url)
    raise IgdError("no WAN connection service in the device description")


def soap_request(
    service: Service, action: str, arguments: dict[str, str | int]
) -> tuple[dict[str, str], bytes]:
    """The HTTP headers and body of ``action`` with ``arguments`` (in their order)."""
    args = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in arguments.items())
    body = (
        '<?xml version="1.0"?>\r\n'
        '<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" '
        's:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/">'
        f'<s:Body><u:{action} xmlns:u="{service.service_type}">{args}</u:{action}>'
        "</s:Body></s:Envelope>\r\n"
    ).encode()
    headers = {
        "Content-Type": 'text/xml; charset="utf-8"',
        "SOAPAction": f'"{service.service_type}#{action}"',
    }
    return headers, body


def parse_soap_response(document: bytes, action: str) -> dict[str, str]:
    """The output arguments of ``action``'s answer.

    :raises SoapFault: the answer is a fault (its UPnP error code and description).
    :raises IgdError: not XML, or neither the action's answer nor a fault.
    """
    root = _parse(document)
    for element in root.iter():
        name = _name(element)
        if name == f"{action}Response":
            return {_name(child): (child.text or "").strip() for child in element}
        if name == "Fault":
            fields = {_name(e): (e.text or "").strip() for e in element.iter()}
            code = fields.get("errorCode", "")
            description = fields.get("errorDescription") or fields.get("faultstring", "")
            raise SoapFault(int(code) if code.isdigit() else 0, description)
    raise IgdError(f"no {action} answer")
