"""``GET /ui/status.json``: one document with everything the status page shows.

It is built from what the server already keeps (the repository index, the release controller, the
breakers on the served versions, the router's fallback counts, the recent events, each stream's
figures) plus the recent traffic figures; nothing here is computed per request. A token limited to some models
(``infer:<model>``) gets only those models, their releases and their events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conch.observability.recent_traffic import ModelTraffic
from conch.server import InferenceServer
from conch.streams.state import stream_states

#: How many recent events the page lists, newest first.
EVENTS_SHOWN = 30

Visible = Callable[[str], bool]


def status_summary(
    server: InferenceServer,
    traffic: Mapping[str, ModelTraffic],
    window_s: float,
    events: Iterable[Mapping[str, Any]],
    visible: Visible = lambda _name: True,
) -> dict[str, Any]:
    """The page's document; ``visible`` says which models the caller may see."""
    metadata = server.metadata()
    models = _models(server, traffic, visible)
    return {
        "server": {
            "name": metadata.get("name", ""),
            "version": metadata.get("version", ""),
            "ready": server.ready(),
            "time": time.time(),
        },
        "window_s": window_s,
        "models": models,
        "releases": _releases(server, visible),
        "streams": [state.to_json() for state in stream_states(server) if visible(state.model)],
        "events": _events(events, visible),
    }


def _models(
    server: InferenceServer, traffic: Mapping[str, ModelTraffic], visible: Visible
) -> list[dict[str, Any]]:
    by_name: dict[str, dict[str, Any]] = {}
    for entry in server.repository_index(folders=True):
        name = str(entry["name"])
        if not visible(name):
            continue
        model = by_name.setdefault(name, _empty_model(name, traffic.get(name)))
        if "state" in entry:  # a folder that is not loaded is listed by its name alone
            model["versions"].append(
                {"version": str(entry["version"]), "state": entry["state"], "reason": entry.get("reason", "")}
            )
    for served in server.repository.versions():
        shown = by_name.get(served.name)
        if shown is None:
            continue
        if served.breaker is not None:
            shown["circuits"].append({"version": str(served.version), "state": served.breaker.state.label})
        level, reason = served.fallback_marker
        if level is not None and reason is not None:  # it answers from a fallback for now
            shown["fallback_now"].append(
                {"version": str(served.version), "level": level.value, "reason": reason.value}
            )
    for (name, version, level_name, reason_name), answers in sorted(server.router.fallbacks.items()):
        if name in by_name:
            by_name[name]["fallbacks"].append(
                {"version": version, "level": level_name, "reason": reason_name, "answers": answers}
            )
    if server.releases is not None:
        for name, shown in by_name.items():
            rejected = server.releases.book.of(name).rejected
            shown["rejected"] = [{"version": n, "reason": r.reason} for n, r in sorted(rejected.items())]
    return [by_name[name] for name in sorted(by_name)]


def _empty_model(name: str, traffic: ModelTraffic | None) -> dict[str, Any]:
    return {
        "name": name,
        "versions": [],
        "traffic": None if traffic is None else traffic.to_json(),
        "circuits": [],
        "fallback_now": [],
        "fallbacks": [],
        "rejected": [],
    }


def _releases(server: InferenceServer, visible: Visible) -> list[dict[str, Any]]:
    if server.releases is None:
        return []
    return [server.releases.status(name) for name in sorted(server.releases.releases) if visible(name)]


def _events(events: Iterable[Mapping[str, Any]], visible: Visible) -> list[dict[str, Any]]:
    shown = []
    for event in reversed(list(events)):
        fields = event.get("fields", {})
        model = fields.get("model")
        if model is not None and not visible(str(model)):
            continue
        shown.append({**event, "fields": {key: _plain(value) for key, value in fields.items()}})
        if len(shown) == EVENTS_SHOWN:
            break
    return shown


def _plain(value: Any) -> Any:
    """A field as JSON can carry it: numbers, strings, booleans and lists of them; the rest as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)
