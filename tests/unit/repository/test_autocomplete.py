"""Auto-complete: defaults every config gets, and what the ONNX graph fills in (Triton's rules)."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.signature import ModelSignature, TensorSignature
from conch.repository.autocomplete import complete_defaults, complete_from_signature, supports_batching
from conch.repository.config import fields_set_in_text, parse_config

# Triton's "simple" model: FP32 [N, 16] in and out.
ADD_SUB = ModelSignature(
    inputs=(TensorSignature("INPUT0", "FP32", (None, 16)), TensorSignature("INPUT1", "FP32", (None, 16))),
    outputs=(TensorSignature("OUTPUT0", "FP32", (None, 16)), TensorSignature("OUTPUT1", "FP32", (None, 16))),
)
FIXED = ModelSignature(
    inputs=(TensorSignature("X", "FP32", (2, 3)),),
    outputs=(TensorSignature("Y", "FP32", (2, 3)),),
)
# B_SUM has only the batch dimension; D is dynamic besides the batch.
MIXED = ModelSignature(
    inputs=(TensorSignature("A", "INT32", (None, 3)), TensorSignature("D", "BYTES", (None, None))),
    outputs=(TensorSignature("B_SUM", "FP64", (None,)),),
)


def completed(text: str, signature: ModelSignature, default_max_batch_size: int = 4) -> mc.ModelConfig:
    """A config as the repository completes it: parsed, defaults, then the graph."""
    config = parse_config(text)
    fields = fields_set_in_text(config, text)
    complete_defaults(config, "model")
    complete_from_signature(config, signature, fields, default_max_batch_size)
    return config


def tensors(entries: list[mc.ModelInput] | list[mc.ModelOutput]) -> list[tuple[str, str, list[int]]]:
    return [(e.name, mc.DataType.Name(e.data_type), list(e.dims)) for e in entries]


def test_defaults_of_an_empty_config() -> None:
    config = mc.ModelConfig()

    complete_defaults(config, "densenet")

    assert config.name == "densenet"
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert config.default_model_filename == "model.onnx"
    assert [(g.name, g.kind, g.count) for g in config.instance_group] == [
        ("densenet_0", mc.ModelInstanceGroup.KIND_CPU, 1)
    ]
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1


def test_defaults_keep_what_the_config_says() -> None:
    config = parse_config(
        'backend: "onnxruntime"\n'
        'default_model_filename: "net.onnx"\n'
        'instance_group [ { name: "pool", count: 3 }, { kind: KIND_CPU } ]\n'
        "version_policy { all { } }\n"
    )

    complete_defaults(config, "densenet")

    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert config.default_model_filename == "net.onnx"
    assert [(g.name, g.count) for g in config.instance_group] == [("pool", 3), ("densenet_1", 1)]
    assert config.version_policy.WhichOneof("policy_choice") == "all"


def test_defaults_fill_backend_from_platform() -> None:
    config = parse_config('platform: "onnxruntime_onnx"')

    complete_defaults(config, "m")

    assert config.backend == "onnxruntime"


def test_supports_batching() -> None:
    assert supports_batching(ADD_SUB)
    assert supports_batching(MIXED)
    assert not supports_batching(FIXED)
    assert not supports_batching(ModelSignature(inputs=(), outputs=()))
    scalar_out = ModelSignature(ADD_SUB.inputs, (TensorSignature("S", "FP32", ()),))
    assert not supports_batching(scalar_out)


def test_no_config_takes_everything_from_the_graph() -> None:
    config = completed("", ADD_SUB)

    assert config.max_batch_size == 4
    assert tensors(config.input) == [("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16])]
    assert tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [16]), ("OUTPUT1", "TYPE_FP32", [16])]


def test_server_default_max_batch_size() -> None:
    assert completed("", ADD_SUB, default_max_batch_size=32).max_batch_size == 32


def test_fixed_first_dim_means_no_batching() -> None:
    config = completed("", FIXED)

    assert config.max_batch_size == 0
    assert tensors(config.input) == [("X", "TYPE_FP32", [2, 3])]
    assert tensors(config.output) == [("Y", "TYPE_FP32", [2, 3])]


def test_explicit_max_batch_size_zero_is_respected() -> None:
    config = completed("max_batch_size: 0", ADD_SUB)

    assert config.max_batch_size == 0
    assert tensors(config.input)[0] == ("INPUT0", "TYPE_FP32", [-1, 16])


def test_explicit_max_batch_size_is_kept() -> None:
    assert completed("max_batch_size: 64", ADD_SUB).max_batch_size == 64


def test_dynamic_dims_become_minus_one_and_bytes_is_type_string() -> None:
    config = completed("", MIXED)

    assert tensors(config.input) == [("A", "TYPE_INT32", [3]), ("D", "TYPE_STRING", [-1])]


def test_batch_only_output_gets_dims_one_and_empty_reshape() -> None:
    config = completed("", MIXED)

    (b_sum,) = config.output
    assert list(b_sum.dims) == [1]
    assert b_sum.HasField("reshape")
    assert list(b_sum.reshape.shape) == []


def test_batch_only_output_without_batching_keeps_its_dynamic_dim() -> None:
    config = completed("max_batch_size: 0", MIXED)

    (b_sum,) = config.output
    assert list(b_sum.dims) == [-1]
    assert not b_sum.HasField("reshape")


def test_inputs_given_outputs_left_out() -> None:
    text = (
        "max_batch_size: 8\n"
        'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4, 4 ], reshape: { shape: [ 16 ] } } ]\n'
    )

    config = completed(text, ADD_SUB)

    assert config.max_batch_size == 8
    assert tensors(config.input) == [("INPUT0", "TYPE_FP32", [4, 4])]
    assert list(config.input[0].reshape.shape) == [16]
    assert tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [16]), ("OUTPUT1", "TYPE_FP32", [16])]
