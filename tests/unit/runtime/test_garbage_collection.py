"""conch.runtime.garbage_collection.settle: the heap built at start is frozen, collections are spaced out,
and garbage cycles made afterwards are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from conch.runtime import garbage_collection


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_settle_freezes_the_heap_and_raises_the_young_threshold(restored: None) -> None:
    before = gc.get_freeze_count()
    kept = [Node() for _ in range(100)]
    garbage_collection.settle()
    assert gc.get_freeze_count() >= before + len(kept)
    assert gc.get_threshold()[0] == garbage_collection.YOUNG_THRESHOLD


def test_a_cycle_made_after_settling_is_still_collected(restored: None) -> None:
    garbage_collection.settle()
    first, second = Node(), Node()
    first.other, second.other = second, first
    watch = weakref.ref(first)
    del first, second
    assert watch() is not None  # a cycle: reference counting alone cannot free it
    gc.collect()
    assert watch() is None
