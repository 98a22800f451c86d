"""What a sync of an object-store mirror does, decided from listings alone: pure, with no I/O.

The mirror places whole units (:data:`Group`): a version folder is built aside and renamed in, so a
reader never sees half a version; a model's other files (``config.pbtxt``, warm-up files) are replaced
one by one. In poll mode a changed unit is placed only once two listings in a row agree on it, so a
version still being uploaded waits for the next poll.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``(model, version)`` for a version folder's files, ``(model,)`` for a model's other files, ``()``
#: for files at the top of the repository.
Group = tuple[str, ...]
#: What the mirror holds of an object: its ETag and size.
Entry = tuple[str, int]


def group_of(path: str) -> Group:
    """The unit ``path`` (relative to the mirror) is placed with; see :data:`Group`."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[1].isdigit():
        return (parts[0], parts[1])
    return (parts[0],) if len(parts) >= 2 else ()


def grouped(entries: dict[str, Entry]) -> dict[Group, dict[str, Entry]]:
    """``{path: entry}`` split by :func:`group_of`."""
    groups: dict[Group, dict[str, Entry]] = {}
    for path, entry in entries.items():
        groups.setdefault(group_of(path), {})[path] = entry
    return groups


@dataclass
class Plan:
    """What a sync does, decided from the listing, the mirror and the previous listing alone."""

    #: Groups to build or rebuild, each with its full new content.
    place: dict[Group, dict[str, Entry]] = field(default_factory=dict)
    #: Groups the bucket no longer has.
    remove: set[Group] = field(default_factory=set)
    #: Groups that changed but that two listings in a row do not yet agree on: left as they are.
    held: set[Group] = field(default_factory=set)


def plan_sync(
    listed: dict[str, Entry], mirrored: dict[str, Entry], previous: dict[str, Entry] | None
) -> Plan:
    """Compare the bucket (``listed``) with the mirror (``mirrored``: the manifest, less the files that
    are gone from disk). ``previous`` is the listing before this one; None applies every change at
    once, as the first sync at start does."""
    now, had = grouped(listed), grouped(mirrored)
    before = grouped(previous) if previous is not None else None
    plan = Plan(remove=set(had) - set(now))
    for group, content in now.items():
        if had.get(group) == content:
            continue
        if before is not None and before.get(group) != content:
            plan.held.add(group)
        else:
            plan.place[group] = content
    # A new model appears whole, so one of its groups held holds them all.
    models_held = {group[0] for group in plan.held if group}
    for group in list(plan.place):
        if group and group[0] in models_held and not any(g and g[0] == group[0] for g in had):
            plan.held.add(group)
            del plan.place[group]
    return plan
