"""``--proxies auto`` (the default): how many proxy processes the cores allow.

Measured with ``python -m bench.scaling`` on a 16-core machine: at 32 clients, proxies as many as the
cores served 0.99x to 2.2x what one process served on the same cores, on every model size; on 2
cores they were slower than one process, and on 4 cores the overhead-bound ``tiny`` gained only
over gRPC. A lone client pays one more hop either way (0.14 to 0.28 ms on ``tiny``). So ``auto``
starts one proxy per usable core from :data:`AUTO_FROM_CORES` cores, none below, and at most
:data:`AUTO_AT_MOST`: the most measured, and each proxy holds about 100 MB of its own.

It starts none where proxies could not help: beside ``--workers`` (which they replace), where every
request would be relayed whole to the model process anyway (the gateway, inference logs or traces
on), and off Linux, whose ``SO_REUSEPORT`` alone spreads connections over the processes sharing a
port.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from conch.core.usable_cores import usable_cores
from conch.observability import tracing

if TYPE_CHECKING:
    from conch.runtime.settings import ServeSettings

#: The fewest usable cores at which ``auto`` starts proxies.
AUTO_FROM_CORES = 8
#: The most proxies ``auto`` starts.
AUTO_AT_MOST = 16


def auto_proxies(cores: int) -> int:
    """Proxies for ``cores`` usable cores: one per core from :data:`AUTO_FROM_CORES`, else none."""
    return min(cores, AUTO_AT_MOST) if cores >= AUTO_FROM_CORES else 0


def proxy_count(
    settings: ServeSettings,
    environ: Mapping[str, str],
    cores: Callable[[], int] = usable_cores,
    platform: str = sys.platform,
) -> tuple[int, str]:
    """The proxies to start and, for the log, why; ``settings.proxies`` None means auto."""
    if settings.proxies is not None:
        return settings.proxies, "as --proxies asks"
    if settings.workers > 1:
        return 0, "auto: --workers serve the ports instead"
    logged = settings.request_log.inferences or settings.request_log.sample_bodies > 0
    if settings.gateway.on or logged or tracing.enabled(settings.tracing, environ):
        return 0, "auto: the gateway, inference logs or traces relay every request to one process"
    if not platform.startswith("linux"):
        return 0, "auto: SO_REUSEPORT spreads connections over processes on Linux only"
    usable = cores()
    rule = f"one per usable core from {AUTO_FROM_CORES}, at most {AUTO_AT_MOST}"
    return auto_proxies(usable), f"auto: {usable} usable cores; {rule}"
