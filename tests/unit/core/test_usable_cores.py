"""The cores conch sizes itself by (``conch.core.usable_cores``): the affinity mask, capped by a cgroup
CPU quota, read from real files laid out as the kernel lays them out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conch.core.usable_cores import cgroup_cpu_quota, usable_cores


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("cpu_max", "quota"),
    [("max 100000\n", None), ("200000 100000\n", 2.0), ("150000 100000\n", 1.5), ("garbage\n", None)],
)
def test_cgroup_v2_cpu_max_gives_the_quota_in_cpus(tmp_path: Path, cpu_max: str, quota: float | None) -> None:
    write(tmp_path / "cpu.max", cpu_max)
    assert cgroup_cpu_quota(tmp_path) == quota


def test_cgroup_v1_quota_and_period_give_the_quota_and_minus_one_means_none(tmp_path: Path) -> None:
    write(tmp_path / "cpu" / "cpu.cfs_quota_us", "400000\n")
    write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path) == 4.0
    write(tmp_path / "cpu" / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_the_process_own_cgroup_is_read_before_the_root(tmp_path: Path) -> None:
    # Without a cgroup namespace, /sys/fs/cgroup is the host's tree: the pod's limit is in its own folder.
    write(tmp_path / "cpu.max", "max 100000\n")
    write(tmp_path / "kubepods" / "pod1" / "cpu.max", "300000 100000\n")
    assert cgroup_cpu_quota(tmp_path, "/kubepods/pod1") == 3.0
    assert cgroup_cpu_quota(tmp_path, "/elsewhere") is None


def test_a_quota_caps_the_affinity_and_a_fraction_rounds_down(tmp_path: Path) -> None:
    proc = write(tmp_path / "proc-self-cgroup", "0::/pod\n")
    write(tmp_path / "cg" / "pod" / "cpu.max", "150000 100000\n")
    assert usable_cores(tmp_path / "cg", proc) == 1
    write(tmp_path / "cg" / "pod" / "cpu.max", "max 100000\n")
    assert usable_cores(tmp_path / "cg", proc) == len(os.sched_getaffinity(0))


def test_a_process_under_taskset_counts_only_its_cores() -> None:
    code = "from conch.core.usable_cores import usable_cores; print(usable_cores())"
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "1", done.stderr


def test_without_affinity_masks_the_machines_cores_count(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # macOS has no sched_getaffinity: the machine's cores, still capped by a quota where one is found.
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert usable_cores(tmp_path / "none", tmp_path / "none") == 12
    write(tmp_path / "cg" / "cpu.max", "400000 100000\n")
    assert usable_cores(tmp_path / "cg", tmp_path / "none") == 4
