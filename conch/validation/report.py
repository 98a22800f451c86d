"""How ``conch validate`` shows its findings: a table for people, a JSON document for programs."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter

from conch.core.findings import Finding, Severity

_COLUMNS = ("MODEL", "SEVERITY", "CODE", "FIELD", "MESSAGE")
_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
_MIN_MESSAGE_WIDTH = 40


def counts(findings: list[Finding]) -> dict[str, int]:
    """Findings per severity, every severity present (``{"error": 0, "warning": 2, "info": 1}``)."""
    seen = Counter(finding.severity for finding in findings)
    return {severity.value: seen[severity] for severity in Severity}


def ordered(findings: list[Finding]) -> list[Finding]:
    """By model, errors first, then warnings, then infos; in the order checked within a severity."""
    return sorted(findings, key=lambda finding: (finding.model, _RANK[finding.severity]))


def as_json(models: list[str], findings: list[Finding]) -> str:
    """The findings (:func:`ordered`), their counts per severity and the models checked, as one object."""
    document = {
        "models": models,
        "valid": not any(finding.is_error for finding in findings),
        "counts": counts(findings),
        "findings": [
            {
                "model": finding.model,
                "severity": finding.severity.value,
                "code": finding.code,
                "field": finding.field,
                "message": finding.message,
                "hint": finding.hint,
            }
            for finding in ordered(findings)
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def as_table(models: list[str], findings: list[Finding]) -> str:
    """One row per finding (:func:`ordered`), its hint under the message, then a summary line."""
    lines = []
    findings = ordered(findings)
    if findings:
        rows = [(f.model, f.severity.value, f.code, f.field) for f in findings]
        widths = [max(len(text) for text in column) for column in zip(_COLUMNS[:4], *rows, strict=True)]
        indent = sum(widths) + 2 * len(widths)
        wrap = max(shutil.get_terminal_size((120, 24)).columns - indent, _MIN_MESSAGE_WIDTH)
        lines.append(_row(_COLUMNS[:4], widths) + _COLUMNS[4])
        for finding, row in zip(findings, rows, strict=True):
            message = textwrap.wrap(" ".join(finding.message.split()), wrap) or [""]
            hint = textwrap.wrap(f"hint: {' '.join(finding.hint.split())}", wrap)
            lines.append(_row(row, widths) + message[0])
            lines += [" " * indent + text for text in message[1:] + hint]
        lines.append("")
    lines.append(summary_line(models, findings))
    return "\n".join(lines)


def summary_line(models: list[str], findings: list[Finding]) -> str:
    """``3 models checked: 1 error, 0 warnings, 2 infos: INVALID``."""
    number = counts(findings)
    parts = ", ".join(_plural(number[s.value], s.value) for s in Severity)
    verdict = "INVALID" if number[Severity.ERROR.value] else "valid"
    return f"{_plural(len(models), 'model')} checked: {parts}: {verdict}"


def _row(cells: tuple[str, ...], widths: list[int]) -> str:
    return "".join(cell.ljust(width + 2) for cell, width in zip(cells, widths, strict=True))


def _plural(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
