"""``dilation:`` endpoint strings for the plugins, and an endpoint's failure in words.

Layer: application edge. :func:`settings_from_string` is what the endpoint-string parsers
(``twisted/plugins/txdilation_endpoints.py``) call: a bad string is a ``ValueError`` naming the
key, or, while a ``twistd`` server is set up, one line and :data:`EXIT_USAGE`. :func:`in_words`
is the one line a program prints instead of a traceback when ``listen()`` or ``connect()`` fails.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from twisted.internet.defer import TimeoutError
from twisted.python.failure import Failure

from txdilation.endpoints.endpoint_settings import EndpointSettings, parse_settings
from txdilation.endpoints.shared import in_twistd
from txdilation.reporting.advice import explain, unwrap
from txdilation.session.config import DEFAULT_MAILBOX, MAILBOX_VARIABLE

__all__ = ["EXIT_USAGE", "in_words", "settings_from_string"]

EXIT_USAGE = 2
"""A ``twistd`` server given a bad ``dilation:`` string exits with this status (one line)."""


def in_words(error: BaseException | Failure, *, mailbox_setting: str = "mailbox=") -> str:
    """Why a ``dilation:`` endpoint's ``listen()`` or ``connect()`` (or any wormhole) failed,
    and what to do, in one line (for a program to print instead of a traceback).

    :param mailbox_setting: how the advice names the mailbox setting (a program's option).
    """
    exc = unwrap(error)
    if isinstance(exc, TimeoutError) and str(exc).startswith("dilation: "):
        return str(exc)  # says how far the wormhole got, and what to check
    explained = explain(exc, mailbox_setting=mailbox_setting)
    return f"{explained.message}; {explained.advice}" if explained.advice else explained.message


def settings_from_string(
    reactor: Any, args: tuple[str, ...], kwargs: dict[str, str], *, client: bool
) -> EndpointSettings:
    """:func:`parse_settings` for the endpoint-string plugins (the mailbox server, when the
    string names none: ``TXDILATION_MAILBOX``, else the public one): a bad string is a
    ``ValueError`` naming the key (also for a ``status`` or ``code-file`` whose directory does
    not exist), except while a ``twistd`` server is being set up (its
    ``--listen``/``--connect`` options), where it is ONE line on stderr and exit status
    :data:`EXIT_USAGE`, not twistd's traceback.
    """
    default_mailbox = os.environ.get(MAILBOX_VARIABLE) or DEFAULT_MAILBOX
    try:
        settings = parse_settings(args, kwargs, client=client, default_mailbox=default_mailbox)
        for key, path in (("status", settings.status), ("code-file", settings.code_file)):
            directory = os.path.dirname(os.path.abspath(path)) if path else None
            if directory is not None and not os.path.isdir(directory):
                raise ValueError(f"dilation: {key}={path}: no directory {directory}")
        return settings
    except ValueError as e:
        if not (in_twistd() and not getattr(reactor, "running", False)):
            raise
        sys.stderr.write(f"twistd: error: {e}; docs/endpoints.md lists the keys\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_USAGE) from None
