"""What ``conch release status`` and ``conch release gate`` print: tables a person reads at a glance.

The status JSON answers every question about a release, but a person at a terminal asks three: where
is it (state, step n of N, weights), is the gate happy (each figure against its limit), and what
happened (the last events, with their reasons). Each gets its own block, laid out with ``rich``; on a
pipe rich writes plain text, so the same lines land in a CI log. Limits are spelled in words (``at
most 0.01``) because a bare number does not say which side of it fails.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from conch.release.gate import GateFigures, GateLimits, Judgement

#: The last events ``status`` shows; ``--json`` gives the whole history.
SHOWN_EVENTS = 8
#: Columns of a table written to a pipe.
PIPE_WIDTH = 120
#: The checks that fail below their limit; every other check fails above it.
_AT_LEAST = {"agreement"}


def console() -> Console:
    """Standard output without guessed colours for numbers: figures stay as the server wrote them.

    On a pipe (a CI log) rich would wrap at 80 columns; 120 keeps an event's reason on one line.
    """
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=PIPE_WIDTH if wide else None)


def print_status(status: dict[str, Any], out: Console) -> None:
    """A ``GET /v2/models/{m}/release`` answer: the release, its gate checks and its last events."""
    if "readmitted" in status:  # a re-admission on a model with no release held
        out.print(f"version {status['readmitted']} of {status['model']} re-admitted by {status['identity']}")
        return
    baseline, candidate = status["baseline"], status["candidate"]
    summary = Table(box=None, show_header=False, title_justify="left", pad_edge=False)
    summary.title = f"Release of {status['model']}: version {baseline} to version {candidate}"
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("state", status["state"])
    summary.add_row("step", _step(status))
    summary.add_row("weights", _weights(status))
    summary.add_row(
        "shadow", "on: every request also runs on the other version" if status["shadow"] else "off"
    )
    summary.add_row("gate", _gate(status["gate"]))
    if status["gate"].get("min_agreement_source"):
        summary.add_row("limit", f"min_agreement: {status['gate']['min_agreement_source']}")
    for waiting in status.get("waiting_for") or []:
        summary.add_row("waiting", waiting)
    approvals = status.get("approvals")
    if approvals:
        by = f" ({', '.join(approvals['by'])})" if approvals["by"] else ""
        summary.add_row("approvals", f"{approvals['have']} of {approvals['needed']}{by}")
    for rejected in status.get("rejected") or []:
        summary.add_row("rejected", f"version {rejected['version']}: {rejected['reason']}")
    for unshared in status.get("unshared_verdicts") or []:
        summary.add_row("unshared", unshared)
    shadow = status["shadow_figures"]
    summary.add_row(
        "compared",
        f"{shadow['compared']} requests, {shadow['agreements']} agreed"
        f"{_share(shadow['agreements'], shadow['compared'])}, {shadow['dropped']} copies dropped",
    )
    out.print(summary)
    out.print(_checks(status["gate"]["checks"]))
    out.print(_events(status["history"][-SHOWN_EVENTS:]))


def print_judgement(
    title: str,
    versions_of: tuple[str, str],
    figures: GateFigures,
    limits: GateLimits,
    judgement: Judgement,
    out: Console,
) -> None:
    """``conch release gate``: the figures read from Prometheus, each check, and the verdict."""
    baseline, candidate = versions_of
    out.print(title)
    versions = Table(box=box.SIMPLE)
    for name in ("version", "requests", "server errors", "P95"):
        versions.add_column(name, justify="left" if name == "version" else "right")
    for label, figure in (
        (f"{baseline} (baseline)", figures.baseline),
        (f"{candidate} (candidate)", figures.candidate),
    ):
        p95 = "no data" if figure.p95_s is None else f"{figure.p95_s * 1000:.3g} ms"
        versions.add_row(label, f"{figure.requests:.0f}", f"{figure.server_errors:.0f}", p95)
    out.print(versions)
    out.print(
        f"compared {figures.compared:.0f} requests, {figures.agreements:.0f} agreed; "
        f"{figures.drifted:.0f} of {figures.drift_scored:.0f} drift-scored above the threshold"
    )
    out.print(_checks([check.to_json() for check in judgement.checks]))
    if judgement.failed:
        out.print(f"failed: {judgement.reason}")
    elif judgement.settled:
        out.print("passed: every limit is kept")
    elif judgement.ready:
        out.print(f"inconclusive: {judgement.waiting}")
    else:
        out.print(f"not judged yet: each version needs {limits.min_requests} requests in the window")


def _step(status: dict[str, Any]) -> str:
    steps = status["spec"]["steps"]
    number = status["step"]
    if number is None:
        versions = f"versions {status['baseline']} and {status['candidate']}"
        return f"none of {len(steps)} yet (waiting for {versions} to be READY)"
    step = steps[number - 1]
    if step.get("pause"):
        what = "a pause step" + (", waiting for promote" if status["state"] == "paused" else "")
    else:
        what = f"weight {step['weight']}"
        if step.get("duration"):
            what += f" for {step['duration']}"
        if step.get("shadow"):
            what += ", shadow"
    elapsed = status.get("step_elapsed_s")
    running = f", {elapsed:.0f}s in" if elapsed is not None and status["state"] == "progressing" else ""
    return f"{number} of {len(steps)}: {what}{running}"


def _weights(status: dict[str, Any]) -> str:
    roles = {str(status["baseline"]): "baseline", str(status["candidate"]): "candidate"}
    return ", ".join(
        f"version {version} ({roles.get(version, '?')}) {weight}%"
        for version, weight in status["weights"].items()
    )


def _gate(gate: dict[str, Any]) -> str:
    judging = "judging" if gate["ready"] else "waiting for min_requests"
    return (
        f"{gate['judge']} judge, {judging}, {gate['consecutive_failures']} of {gate['failure_threshold']} "
        "consecutive failures"
    )


def _share(part: float, whole: float) -> str:
    return f" ({part / whole:.1%})" if whole else ""


def _checks(checks: list[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE, title="Gate checks", title_justify="left")
    for name in ("check", "value", "limit", "outcome"):
        table.add_column(name)
    if not checks:
        table.add_row("no judgement yet", "", "", "")
    for check in checks:
        value = "no data" if check["value"] is None else f"{check['value']:.4g}"
        if check.get("lower") is not None and check.get("upper") is not None:
            value += f" [{check['lower']:.4g}, {check['upper']:.4g}]"
        if check.get("noise"):
            value += f", noise {check['noise']:.2g}"
        side = "at least" if check["name"] in _AT_LEAST else "at most"
        outcome = check["outcome"] + (f": {check['detail']}" if check.get("detail") else "")
        table.add_row(check["name"], value, f"{side} {check['limit']:g}", outcome)
    return table


def _events(history: list[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE, title="Last events", title_justify="left")
    for name in ("time", "event", "state", "step", "reason"):
        table.add_column(name, no_wrap=name != "reason")
    for event in history:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["time"]))
        step = "" if event["step"] is None else str(event["step"])
        table.add_row(at, event["event"], event["state"], step, event["reason"])
    return table
