"""One intra-op thread for a model whose runs are too short for ONNX Runtime's threads to pay.

Why: ONNX Runtime splits an operator over its intra-op threads once the operator holds enough
work, and an idle thread sleeps (conch's ``allow_spinning`` 0), so each parallel operator first
wakes a thread and then waits for it. For a small model that wait is longer than the operator: in a
server under 32 clients one ``s64`` execution took 119 us on one thread against 183 us on two
(``python -m bench.threads_ab``). Where a run is short it runs on the event loop itself
(``conch.scheduling.instance_pool``), so the wait is taken from every other request, and with more
cores the default gives a model more threads to wake.

Timed alone, a second thread pays from ``s256`` at 64 rows, but in a loaded server it does not: the
second thread takes the core the event loop needs (``s256`` at 32 HTTP JSON clients served 1.16x
[1.07-1.28] on one thread what it served on two). ``s384`` (2.0 ms for 64 rows on one thread) was
level under load and keeps two.

So when a model's config leaves ``intra_op_thread_count`` unset, conch times a run on one thread at
load, at the largest batch the model takes (at most :data:`PROBE_ROWS` rows), and keeps one thread
when that run takes less than :data:`PARALLEL_PAYS_FROM_NS`. A model whose shapes cannot be filled
in (dynamic dimensions besides the batch, string inputs) or whose file is large keeps the default.
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import default_intra_op_threads, open_session, read_signature
from conch.backends.placement import Placement
from conch.core import datatypes

log = logging.getLogger(__name__)

#: Rows of the timed run: the model's largest batch, up to this many.
PROBE_ROWS = 64
#: A run on one thread shorter than this keeps one thread: below it a loaded server did as well or
#: better on one thread (``s256``, 0.5 ms); from about 2 ms (``s384``) the second thread paid alone
#: and was level under load, and above it (``mlp``, 10 ms) it paid everywhere.
PARALLEL_PAYS_FROM_NS = 1_000_000
#: Model files larger than this keep the default without a timed run: a graph with this many
#: weights takes longer than the threshold per row, and opening it twice would slow its load.
PROBE_MAX_FILE_BYTES = 64 << 20
#: Runs before timing (ONNX Runtime allocates and plans on the first), then runs timed.
_WARM_RUNS, _TIMED_RUNS = 3, 9
#: A run after the first (which allocates) this many times the threshold settles it.
_CLEARLY_ABOVE = 5


def one_thread_session(
    model_file: Path, config: mc.ModelConfig, placements: list[Placement], cores: int | None
) -> ort.InferenceSession | None:
    """A session of ``model_file`` on one intra-op thread when the model's runs are short, else None.

    ``config`` is complete (the graph's shapes applied). None also where the config chose its own
    thread count, where the default is one thread already, where an instance is on a GPU, and where
    the model cannot be timed (see the module's docstring).
    """
    if "intra_op_thread_count" in config.parameters or any(p.gpu for p in placements):
        return None
    instances = sum(group.count for group in config.instance_group) or 1
    if default_intra_op_threads(instances, cores) <= 1:
        return None
    if model_file.stat().st_size > PROBE_MAX_FILE_BYTES:
        return None
    session = open_session(model_file, config, placements[0], cores, threads=1)
    feed = probe_feed(session, config)
    if feed is None:
        return None
    try:
        spent_ns = median_run_ns(session, feed)
    except Exception:  # zeros a graph refuses: its warm-up, next, says what is wrong if anything is
        return None
    short = spent_ns < PARALLEL_PAYS_FROM_NS
    log.debug(
        "model '%s': a run of the probe batch takes %d us on one thread: %s",
        config.name,
        spent_ns // 1000,
        "one intra-op thread" if short else "the default threads",
    )
    return session if short else None


def probe_feed(session: ort.InferenceSession, config: mc.ModelConfig) -> dict[str, np.ndarray] | None:
    """Zeros for every graph input at the largest batch (at most :data:`PROBE_ROWS`), or None where a
    shape has a dynamic dimension besides the batch, or an input holds strings."""
    rows = min(config.max_batch_size, PROBE_ROWS)
    feed = {}
    for tensor in read_signature(session).inputs:
        dims = list(tensor.shape)
        if config.max_batch_size > 0 and dims and dims[0] is None:
            dims[0] = rows
        shape = [d for d in dims if d is not None]
        if len(shape) < len(dims) or tensor.datatype == "BYTES":
            return None
        feed[tensor.name] = datatypes.zeros(datatypes.from_name(tensor.datatype), tuple(shape))
    return feed


def median_run_ns(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> int:
    """The median wall time of a run of ``feed``, after warm-up runs; a warm run already far above
    :data:`PARALLEL_PAYS_FROM_NS` answers at once, so a large model's load is not held up."""
    spent = []
    for number in range(_WARM_RUNS + _TIMED_RUNS):
        start = time.perf_counter_ns()
        session.run(None, feed)
        elapsed = time.perf_counter_ns() - start
        if number and elapsed > _CLEARLY_ABOVE * PARALLEL_PAYS_FROM_NS:
            return elapsed
        if number >= _WARM_RUNS:
            spent.append(elapsed)
    return int(statistics.median(spent))
