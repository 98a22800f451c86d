"""Instance placement from ``instance_group``: how many instances, and on which device."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.placement import CPU, Placement, instance_placements


def placements(text: str) -> list[Placement]:
    return instance_placements(text_format.Parse(text, mc.ModelConfig()))


def test_no_instance_group_is_one_cpu_instance() -> None:
    assert placements('name: "m"') == [CPU]


def test_cpu_count_gives_that_many_cpu_instances() -> None:
    assert placements("instance_group [ { count: 3 kind: KIND_CPU } ]") == [CPU, CPU, CPU]


def test_gpu_count_is_per_listed_gpu() -> None:
    result = placements("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]")

    assert result == [Placement(True, 0), Placement(True, 0), Placement(True, 1), Placement(True, 1)]
    assert [str(p) for p in result] == ["GPU 0", "GPU 0", "GPU 1", "GPU 1"]


def test_gpu_without_a_list_means_gpu_zero_and_groups_add_up() -> None:
    result = placements("instance_group [ { count: 1 kind: KIND_GPU }, { count: 2 kind: KIND_CPU } ]")

    assert result == [Placement(True, 0), CPU, CPU]
