"""twistd plugin ``dilation``: a long-running dilated session (txdilation.session.tap).

Only this module is imported when twistd lists its plugins; the session code loads when the
``dilation`` subcommand is used. No ``__init__.py`` here: ``twisted.plugins`` is a namespace
that Twisted extends over every ``twisted/plugins`` directory on ``sys.path``.
"""

from __future__ import annotations

from twisted.application.service import ServiceMaker

dilation = ServiceMaker(
    "txdilation session",
    "txdilation.session.tap",
    "Hold a dilated magic-wormhole and forward named services over it (txdilation).",
    "dilation",
)
