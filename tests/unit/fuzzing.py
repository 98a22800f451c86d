"""The hypothesis settings the ``test_fuzz_*`` modules share, and their one property.

Bounded for CI: ``CONCH_FUZZ_EXAMPLES`` examples per test (default 60), which keeps all the fuzz
modules together to a few seconds. A longer run by hand::

    CONCH_FUZZ_EXAMPLES=20000 .venv/bin/pytest -q tests/unit/*/test_fuzz_*.py

The deadline is generous (the machine is shared): it is there to catch a hang or a blow-up, not to
time the code.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from conch.core.errors import ConchError

FUZZ = settings(
    max_examples=int(os.environ.get("CONCH_FUZZ_EXAMPLES", "60")),
    deadline=5000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    database=None,
)

#: Any JSON value, nested a little.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


def decodes_or_refuses(decode: Callable[[], Any], error: type[Exception] = ConchError) -> Any:
    """Run ``decode``: its result, or None when it raised ``error`` (a ConchError must be a 4xx).

    Any other exception propagates, and hypothesis reports the input that raised it.
    """
    try:
        return decode()
    except error as exc:
        if isinstance(exc, ConchError):
            assert 400 <= exc.kind.http_status < 500, f"{exc.kind}: {exc.message}"
            assert exc.message, "a refusal must say what was wrong"
        return None
