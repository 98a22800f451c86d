"""Python's cyclic garbage collector, set for a server whose heap is built once at start.

Why: with CPython's defaults (a young collection every 700 net new container objects), conch ran one
collection every ~35 ``tiny`` requests at 32 HTTP clients, and every few seconds a full one over
the whole heap (the loaded models, protobuf, numpy, gRPC: ~68,000 tracked objects), which held
the event loop for 40 to 100 ms each time.

A request's objects are freed by reference counting as soon as its answer goes; the collector only
needs to find the rare cycles (an exception and its traceback, say). So once the repository has
loaded, :func:`settle` collects once, moves every surviving object to the permanent generation
(``gc.freeze``: the collector no longer walks them), and raises the young threshold so a collection
runs after :data:`YOUNG_THRESHOLD` net new objects, not 700. Measured on the same load: one
collection in 10 s instead of ~2,000, and no pause. Garbage cycles are still collected; they wait
for a few thousand objects' worth of them instead of 700.

Objects made after the freeze (a model loaded later, say) are collected as usual. A frozen object
that becomes garbage is still freed by reference counting; only a cycle among frozen objects (an
unloaded model's, at worst) stays until the process ends.
"""

from __future__ import annotations

import gc

#: Net new container objects between young collections (CPython's default is 700).
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Collect once, freeze what is left, and space the collections out (see the module doc)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
