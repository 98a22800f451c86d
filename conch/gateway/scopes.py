"""What a token may do, from its scopes.

Scopes come from the ``scope`` claim, a space-separated string (RFC 9068, section 2.2.3), or from an
``scp`` list, which some identity providers write instead. ``infer`` allows every model's inference
and reading; ``infer:<model>`` allows one model's; ``admin`` allows changes (load, unload, releases,
shared-memory registration). ``admin`` does not imply ``infer``: an operator's token that can load a
model need not be one that can read its predictions, and a token carries both when it needs both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from conch.core.errors import NotFoundError, did_you_mean
from conch.gateway.api_groups import Access, Call

ADMIN_SCOPE = "admin"
INFER_SCOPE = "infer"


@dataclass(frozen=True)
class Grant:
    """What one token allows."""

    admin: bool = False
    every_model: bool = False
    models: frozenset[str] = frozenset()
    #: The verified token's ``sub``: who approves or re-admits a release's version ("" without a token).
    subject: str = ""

    def may_see(self, model: str) -> bool:
        """Whether the token may infer with, and read about, ``model``."""
        return self.every_model or model in self.models

    @property
    def may_infer(self) -> bool:
        return self.every_model or bool(self.models)


def scopes_of(claims: Mapping[str, Any]) -> set[str]:
    """The scopes of verified claims: ``scope`` split on spaces, plus every string of ``scp``."""
    found: set[str] = set()
    scope = claims.get("scope")
    if isinstance(scope, str):
        found.update(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        found.update(each for each in scp if isinstance(each, str))
    elif isinstance(scp, str):
        found.update(scp.split())
    return found


def grant_of(scopes: set[str]) -> Grant:
    models = frozenset(s.removeprefix("infer:") for s in scopes if s.startswith("infer:") and len(s) > 6)
    return Grant(admin=ADMIN_SCOPE in scopes, every_model=INFER_SCOPE in scopes, models=models)


def missing_scope(grant: Grant, call: Call, known: Collection[str]) -> str | None:
    """The scope ``call`` needs that ``grant`` lacks, or None when it is allowed.

    Raises :class:`NotFoundError` for a model the token may not see, in the words the repository
    uses for an unknown model and with suggestions only among the models it may see: a token for one
    model learns nothing of the others, not even that they exist. A model it may see that is not
    served gets the same answer, so the repository's own suggestions (every model) never reach it.
    """
    if call.access is Access.OPEN:
        return None
    if call.access is Access.ADMIN:
        return None if grant.admin else ADMIN_SCOPE
    if not grant.may_infer:
        return INFER_SCOPE if not call.model else f"{INFER_SCOPE}:{call.model}"
    if call.model and not grant.every_model and (call.model not in grant.models or call.model not in known):
        visible = [name for name in known if name in grant.models]
        raise NotFoundError(
            f"Request for unknown model: '{call.model}' is not found{did_you_mean(call.model, visible)}"
        )
    return None
