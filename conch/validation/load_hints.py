"""What to do when ONNX Runtime cannot open a model: the fix its error points to, in the user's words.

Most such errors mean an opset or operator this ONNX Runtime lacks, and the fix is a re-export. One is
not: a text model whose ``StringNormalizer`` lower-cases in a locale the machine does not have
(ONNX Runtime's default is ``en_US.UTF-8``; slim Debian and Ubuntu images have only ``C.UTF-8``). It
fails with "Failed to construct locale with name:...", and re-exporting with another opset would not
help.
"""

from __future__ import annotations

import re

_MISSING_LOCALE = re.compile(r"Failed to construct locale with name:\s*([^\s:]+)")


def missing_locale(reason: str) -> str | None:
    """The locale an ONNX Runtime error says is missing, if that is what it says."""
    found = _MISSING_LOCALE.search(reason)
    return found.group(1) if found else None


def not_loadable_hint(reason: str) -> str:
    """The fix for a model ONNX Runtime cannot open, from its error ``reason``."""
    locale = missing_locale(reason)
    if locale is not None:
        return (
            f"the model lower-cases text (a StringNormalizer) in locale '{locale}', which this machine "
            "does not have: re-export it with conch export, which uses C.UTF-8 (every slim Debian or "
            f"Ubuntu image has it), or install the locale where the model is served (locale-gen {locale})"
        )
    return (
        "ONNX Runtime cannot open the model: re-export it with an opset and operators this ONNX Runtime "
        "supports"
    )
