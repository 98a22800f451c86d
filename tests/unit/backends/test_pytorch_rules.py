"""The PyTorch backend's rules that need no torch: Triton's binding of names to positions, the model's
``parameters``, the cold-start warm-up samples and the allocator figures from a ``memory_stats`` dict."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.pytorch.cold_start import cold_start_batch_sizes, cold_start_config
from conch.backends.pytorch.naming import input_positions, output_positions
from conch.backends.pytorch.options import MemoryCap, options_from_config
from conch.core.errors import InvalidArgumentError
from conch.observability.gpu_allocator_metrics import allocator_figures


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig(name="m"))


def parameters(**values: str) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m")
    for key, value in values.items():
        result.parameters[key].string_value = value
    return result


def test_inputs_named_as_the_forward_arguments_bind_by_name_in_any_order() -> None:
    assert input_positions(["mask", "image"], ["image", "mask"], "m") == [1, 0]


def test_inputs_named_name__index_bind_by_their_index() -> None:
    assert input_positions(["B__1", "A__0"], ["x", "y"], "m") == [1, 0]


def test_other_input_names_bind_in_config_order() -> None:
    assert input_positions(["first", "second"], ["x", "y"], "m") == [0, 1]


def test_inputs_that_leave_an_argument_unbound_are_a_load_error() -> None:
    with pytest.raises(InvalidArgumentError, match=r"do not bind the program's 2 forward argument\(s\)"):
        input_positions(["INPUT__0", "INPUT__2"], ["x", "y"], "m")
    with pytest.raises(InvalidArgumentError, match=r"INPUT__0 \.\. INPUT__N"):
        input_positions(["INPUT__0"], ["x", "y"], "m")


def test_two_inputs_with_one_index_are_a_load_error() -> None:
    with pytest.raises(InvalidArgumentError, match="share an index"):
        input_positions(["A__0", "B__0"], ["x", "y"], "m")


def test_outputs_bind_by_index_or_config_order_and_must_exist() -> None:
    assert output_positions(["OUTPUT__1", "OUTPUT__0"], 2, "m") == [1, 0]
    assert output_positions(["probabilities", "logits"], 2, "m") == [0, 1]
    assert output_positions(["OUTPUT__3"], None, "m") == [3]  # TorchScript: only a run can tell
    with pytest.raises(
        InvalidArgumentError, match=r"returns 2 tensor\(s\): number them OUTPUT__0 .. OUTPUT__1"
    ):
        output_positions(["OUTPUT__2"], 2, "m")


def test_parameters_default_to_fp32_contiguous_and_no_cap() -> None:
    options = options_from_config(mc.ModelConfig(name="m"))

    assert (options.half, options.channels_last, options.memory_cap, options.intra_op_threads) == (
        False,
        False,
        None,
        None,
    )


def test_parameters_read_precision_memory_format_cap_and_threads() -> None:
    options = options_from_config(
        parameters(
            precision="FP16",
            memory_format="channels_last",
            gpu_memory_fraction="0.25",
            INTRA_OP_THREAD_COUNT="2",
        )
    )

    assert options.half and options.channels_last and options.intra_op_threads == 2
    assert options.memory_cap == MemoryCap(fraction=0.25)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gpu_memory_fraction": "1.5"}, "must be a number above 0 and at most 1, got '1.5'"),
        ({"gpu_memory_fraction": "-0.1"}, "got '-0.1'"),
        ({"gpu_memory_fraction": "0"}, "got '0'"),
        ({"gpu_memory_fraction": "half"}, "got 'half'"),
        ({"gpu_memory_fraction": "nan"}, "got 'nan'"),
        ({"gpu_memory_limit_bytes": "-1"}, "'gpu_memory_limit_bytes' must be a positive integer, got '-1'"),
        ({"gpu_memory_limit_bytes": "8GB"}, "got '8GB'"),
        ({"gpu_memory_limit_bytes": "1", "gpu_memory_fraction": "0.5"}, "both set: keep one"),
        ({"precision": "int4"}, "'precision' must be one of ['fp32', 'fp16'], got 'int4'"),
        ({"memory_format": "nhwc"}, "must be one of ['contiguous', 'channels_last']"),
        ({"INTRA_OP_THREAD_COUNT": "0"}, "'INTRA_OP_THREAD_COUNT' must be a positive integer"),
    ],
)
def test_bad_parameters_are_load_errors_saying_which(values: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        options_from_config(parameters(**values))

    assert message in raised.value.message


def test_a_byte_limit_becomes_a_fraction_of_the_gpu_and_may_not_exceed_it() -> None:
    assert MemoryCap(limit_bytes=2 << 30).fraction_of(8 << 30) == 0.25
    assert MemoryCap(fraction=0.4).fraction_of(8 << 30) == 0.4
    with pytest.raises(InvalidArgumentError, match="more than the GPU's"):
        MemoryCap(limit_bytes=9 << 30).fraction_of(8 << 30)


def test_cold_start_runs_the_preferred_batch_sizes_largest_first() -> None:
    batching = config(
        "max_batch_size: 64 dynamic_batching { preferred_batch_size: [ 8, 32, 128 ] }"
        ' input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 4 ] } ]'
    )

    assert cold_start_batch_sizes(batching) == [32, 8]  # 128 is above max_batch_size
    assert cold_start_batch_sizes(config("max_batch_size: 16")) == [16]
    assert cold_start_batch_sizes(config("max_batch_size: 0")) == [1]
    warm = cold_start_config(batching)
    assert warm is not None
    assert [
        (s.batch_size, dict(s.inputs)["x"].zero_data, list(s.inputs["x"].dims)) for s in warm.model_warmup
    ] == [
        (32, True, [3, 4]),
        (8, True, [3, 4]),
    ]
    assert not batching.model_warmup  # the served config is left as it was


def test_cold_start_keeps_the_configs_own_warmup_and_skips_variable_dims() -> None:
    own = config('max_batch_size: 4 model_warmup [ { name: "w" batch_size: 1 } ]')
    variable = config('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]')

    assert cold_start_config(own) is None
    assert cold_start_config(variable) is None


def test_allocator_figures_from_a_memory_stats_dict() -> None:
    figures = allocator_figures(
        {
            "reserved_bytes.all.current": 1000,
            "allocated_bytes.all.current": 650,
            "num_alloc_retries": 3,
            "active_bytes.all.current": 700,
        }
    )

    assert (figures.reserved_bytes, figures.allocated_bytes, figures.retries) == (1000, 650, 3)
    assert figures.fragmentation_ratio == pytest.approx(0.35)
    assert allocator_figures({}).fragmentation_ratio == 0.0  # nothing reserved yet
