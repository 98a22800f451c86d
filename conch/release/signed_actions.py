"""The release actions that record who took them: ``approve`` a step, ``readmit`` a rejected version.

Who it was is the verified token's ``sub`` when the server runs ``--auth jwt``. Without auth nobody can be
verified, so the request names itself (``{"identity": "alice"}``, ``conch release approve --as alice``),
and the server warns at the start of a release that needs more than one approval that its approvers'
identities are not verified.
"""

from __future__ import annotations

import re
from typing import Any

from conch.core.errors import InvalidArgumentError

#: ``POST /v2/models/{m}/release/{action}`` actions that record an identity.
SIGNED_ACTIONS = ("approve", "readmit")
_IDENTITY = re.compile(r"[\w.@+:/-]{1,128}")


def signer(body: dict[str, Any], subject: str) -> str:
    """Who takes the action: the token's ``sub``, else the body's ``identity``."""
    named = body.get("identity")
    if subject:
        if named is not None and named != subject:
            raise InvalidArgumentError(
                f"the identity comes from your token ('{subject}'); leave 'identity' out of the body"
            )
        return subject
    if not isinstance(named, str) or not _IDENTITY.fullmatch(named):
        raise InvalidArgumentError(
            'say who approves or re-admits: a body {"identity": "alice"} (conch release ... --as alice), '
            "1 to 128 letters, digits or . @ + : / - _; without --auth jwt nobody verifies it"
        )
    return named


def readmitted_version(body: dict[str, Any]) -> int:
    """The version a ``readmit`` names: ``{"version": 5}``."""
    version = body.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgumentError(
            f'readmit needs the version to re-admit, a whole number from 1: {{"version": 5}}, got {version!r}'
        )
    return version
