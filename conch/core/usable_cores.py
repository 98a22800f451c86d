"""How many cores this process may really use: its CPU affinity, capped by a cgroup CPU quota.

Why: ``os.cpu_count()`` counts the machine's cores. A pod limited to 2 CPUs on a 64-core node, or a
server started under ``taskset -c 0``, would then size its ONNX Runtime thread pools and its
proxy processes for 64 cores, and spend its quota switching between them. Kubernetes sets CPU
limits as a CFS quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); the affinity mask covers
``taskset`` and cpusets. A fractional quota rounds down (at least one core): 2.5 CPUs keep 2 busy
threads without being throttled.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def usable_cores(cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP) -> int:
    """The cores in this process's affinity mask, fewer where a cgroup quota allows fewer (on a system
    without affinity masks, such as macOS, the machine's cores)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, _own_cgroup(proc_self_cgroup))
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def cgroup_cpu_quota(root: Path, own: str = "/") -> float | None:
    """CPUs the quota allows (``2.5``), or None where there is none or it cannot be read.

    Looks in this process's own cgroup first (``own``, from ``/proc/self/cgroup``; a container
    without a cgroup namespace sees the host's tree), then at ``root`` (a container with one sees its
    own cgroup there).
    """
    for folder in dict.fromkeys((root / own.lstrip("/"), root)):
        found = _v2_quota(folder / "cpu.max")
        if found is not None:
            return found
        for v1 in (folder / "cpu", folder / "cpu,cpuacct", folder):
            found = _v1_quota(v1 / "cpu.cfs_quota_us", v1 / "cpu.cfs_period_us")
            if found is not None:
                return found
    return None


def _v2_quota(path: Path) -> float | None:
    """``cpu.max`` holds ``QUOTA PERIOD`` in microseconds, or ``max PERIOD`` for no limit."""
    fields = _read(path).split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(quota: Path, period: Path) -> float | None:
    """``cpu.cfs_quota_us`` is -1 for no limit."""
    return _ratio(_read(quota).strip(), _read(period).strip())


def _ratio(quota: str, period: str) -> float | None:
    try:
        allowed, window = int(quota), int(period)
    except ValueError:
        return None
    return allowed / window if allowed > 0 and window > 0 else None


def _own_cgroup(proc_self_cgroup: Path) -> str:
    """This process's cgroup v2 path (``0::/kubepods/...``), or ``/`` where there is none."""
    for line in _read(proc_self_cgroup).splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and path:
            return path
    return "/"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
