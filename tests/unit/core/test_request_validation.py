"""Checking an inference request against its model config before it runs."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError
from conch.core.request_validation import validate_request
from conch.core.types import InferenceRequest, RequestedOutput, Tensor
from conch.repository.config import parse_config

# A batching model: image FP32 [N, 4], ids INT32 [N, -1]; an optional mask; outputs in this order.
CONFIG = parse_config(
    """
    name: "tagger"
    max_batch_size: 8
    input [
      { name: "image", data_type: TYPE_FP32, dims: [ 4 ] },
      { name: "ids", data_type: TYPE_INT32, dims: [ -1 ] },
      { name: "mask", data_type: TYPE_BOOL, dims: [ 4 ], optional: true }
    ]
    output [
      { name: "scores", data_type: TYPE_FP32, dims: [ 4 ] },
      { name: "labels", data_type: TYPE_STRING, dims: [ 1 ] }
    ]
    """
)


def image(batch: int = 2, width: int = 4) -> Tensor:
    return Tensor("image", "FP32", np.zeros((batch, width), dtype=np.float32))


def ids(batch: int = 2, length: int = 7) -> Tensor:
    return Tensor("ids", "INT32", np.zeros((batch, length), dtype=np.int32))


def request(*inputs: Tensor, outputs: tuple[str, ...] = ()) -> InferenceRequest:
    return InferenceRequest(
        model_name="tagger", inputs=list(inputs), outputs=[RequestedOutput(name) for name in outputs]
    )


def test_valid_request_returns_inputs_by_name_and_outputs_in_config_order() -> None:
    given_image, given_ids = image(), ids()

    inputs, outputs = validate_request(request(given_ids, given_image), CONFIG)

    assert inputs.keys() == {"image", "ids"}
    assert inputs["image"] is given_image.data
    assert outputs == ["scores", "labels"]


def test_requested_outputs_keep_the_request_order() -> None:
    _, outputs = validate_request(request(image(), ids(), outputs=("labels", "scores")), CONFIG)

    assert outputs == ["labels", "scores"]


def test_optional_input_may_be_given() -> None:
    mask = Tensor("mask", "BOOL", np.ones((2, 4), dtype=bool))

    inputs, _ = validate_request(request(image(), ids(), mask), CONFIG)

    assert inputs["mask"] is mask.data


def test_unknown_input() -> None:
    extra = Tensor("imgae", "FP32", np.zeros((2, 4), dtype=np.float32))

    with pytest.raises(
        InvalidArgumentError,
        match=r"unexpected inference input 'imgae' for model 'tagger'; .*; did you mean 'image'\?$",
    ):
        validate_request(request(image(), ids(), extra), CONFIG)


def test_missing_input_with_an_optional_one_gives_the_range_as_triton() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_request(request(image()), CONFIG)

    assert caught.value.message == (
        "expected number of inputs between 2 and 3 but got 1 inputs for model 'tagger'. Got input(s) "
        "['image'], but missing required input(s) ['ids']. Please provide all required input(s)."
    )


def test_missing_input_of_a_model_without_optional_inputs_gives_the_count_as_triton() -> None:
    config = mc.ModelConfig()
    config.CopyFrom(CONFIG)
    del config.input[2]

    with pytest.raises(InvalidArgumentError) as caught:
        validate_request(request(), config)

    assert caught.value.message == (
        "expected 2 inputs but got 0 inputs for model 'tagger'. Got input(s) [], but missing required "
        "input(s) ['image','ids']. Please provide all required input(s)."
    )


def test_duplicate_input() -> None:
    with pytest.raises(InvalidArgumentError, match="input 'image' is given more than once"):
        validate_request(request(image(), ids(), image()), CONFIG)


def test_wrong_datatype() -> None:
    as_fp64 = Tensor("ids", "FP64", np.zeros((2, 7), dtype=np.float64))

    with pytest.raises(
        InvalidArgumentError,
        match=r"^inference input 'ids' data-type is 'FP64', but model 'tagger' expects 'INT32'; "
        r"send it as INT32$",
    ):
        validate_request(request(image(), as_fp64), CONFIG)


@pytest.mark.parametrize("shape", [(2, 5), (2, 4, 1), (4,)], ids=["wrong-dim", "extra-dim", "no-batch-dim"])
def test_wrong_shape(shape: tuple[int, ...]) -> None:
    wrong = Tensor("image", "FP32", np.zeros(shape, dtype=np.float32))

    with pytest.raises(
        InvalidArgumentError,
        match=r"^unexpected shape for input 'image' for model 'tagger'\. Expected \[-1,4\], got "
        + re.escape("[" + ",".join(map(str, shape)) + "]")
        + "; -1 is any size, and the first dimension is the batch",
    ):
        validate_request(request(wrong, ids(batch=shape[0])), CONFIG)


def test_batch_above_max_batch_size_names_config_pbtxt_and_export() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_request(request(image(batch=9), ids(batch=9)), CONFIG)

    message = caught.value.message
    assert message.startswith(
        "inference request batch-size must be <= 8 for 'tagger': input 'image' has batch size 9."
    )
    assert "max_batch_size in the model's config.pbtxt" in message
    assert "max_batch_size= argument" in message
    assert "--default-max-batch-size" not in message


def test_batch_above_an_auto_completed_max_batch_size_names_the_server_flag() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_request(request(image(batch=9), ids(batch=9)), CONFIG, max_batch_size_completed=True)

    message = caught.value.message
    assert message.startswith("inference request batch-size must be <= 8 for 'tagger'")
    assert "the server's --default-max-batch-size" in message
    assert "config.pbtxt does not set max_batch_size" in message


def test_empty_batch() -> None:
    with pytest.raises(InvalidArgumentError, match="needs a batch dimension >= 1"):
        validate_request(request(image(batch=0), ids(batch=0)), CONFIG)


def test_inputs_must_share_one_batch_size() -> None:
    with pytest.raises(InvalidArgumentError, match=r"must share one batch size, got \[2, 3\]"):
        validate_request(request(image(batch=2), ids(batch=3)), CONFIG)


def test_unknown_requested_output() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"unexpected inference output 'probs'.* \['scores', 'labels'\]"
    ):
        validate_request(request(image(), ids(), outputs=("probs",)), CONFIG)


def test_unknown_requested_output_suggests_the_closest() -> None:
    with pytest.raises(InvalidArgumentError, match=r"did you mean 'scores'\?$"):
        validate_request(request(image(), ids(), outputs=("score",)), CONFIG)


def test_an_output_requested_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="output 'labels' already requested; name each output"):
        validate_request(request(image(), ids(), outputs=("labels", "scores", "labels")), CONFIG)


def test_model_without_batching_checks_the_full_shape() -> None:
    config = mc.ModelConfig()
    config.CopyFrom(CONFIG)
    config.max_batch_size = 0

    one_image = Tensor("image", "FP32", np.zeros(4, dtype=np.float32))
    one_ids = Tensor("ids", "INT32", np.zeros(7, dtype=np.int32))

    validate_request(request(one_image, one_ids), config)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^unexpected shape for input 'image' for model 'tagger'\. Expected \[4\], got \[1,4\]; .*"
        "does not batch",
    ):
        validate_request(request(image(batch=1), one_ids), config)


def test_a_config_changed_in_place_is_checked_by_its_new_rules() -> None:
    """The rules read off a config are kept, so a config edited after a request (auto-complete does
    this at load) must not be checked by the rules of its old contents."""
    config = mc.ModelConfig()
    config.CopyFrom(CONFIG)
    validate_request(request(image(), ids()), config)

    config.input[0].dims[0] = 5

    with pytest.raises(InvalidArgumentError, match=re.escape("Expected [-1,5], got [2,4]")):
        validate_request(request(image(), ids()), config)
    validate_request(request(image(width=5), ids()), config)


def test_an_input_type_conch_lacks_is_refused_when_the_input_is_checked() -> None:
    config = mc.ModelConfig()
    config.CopyFrom(CONFIG)
    config.input[0].data_type = mc.TYPE_BF16

    with pytest.raises(InvalidArgumentError, match=r"^data type TYPE_BF16 is not supported by conch$"):
        validate_request(request(image(), ids()), config)


def test_a_shape_with_any_size_dimensions_fits_any_size_there() -> None:
    inputs, _ = validate_request(request(image(batch=3), ids(batch=3, length=11)), CONFIG)

    assert inputs["ids"].shape == (3, 11)


def test_a_served_version_reads_its_rules_once_and_checks_by_them() -> None:
    from conch.models.model import ModelVersion

    version = ModelVersion("tagger", 1, CONFIG)
    rules = version.request_rules

    assert version.request_rules is rules, "a served version keeps the rules it read"
    assert list(rules.inputs) == ["image", "ids", "mask"]
    inputs, _ = validate_request(request(image(), ids()), CONFIG, rules=rules)
    assert list(inputs) == ["image", "ids"]
    with pytest.raises(InvalidArgumentError, match="unexpected inference input 'extra'"):
        validate_request(
            request(image(), ids(), Tensor("extra", "FP32", np.zeros((2, 4)))), CONFIG, rules=rules
        )
