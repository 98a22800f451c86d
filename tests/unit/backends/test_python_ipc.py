"""conch_ipc: tensors through shared memory segments and back, segment sizing and reuse, framing."""

from __future__ import annotations

import os
import pickle
import socket

import numpy as np
import pytest

from conch.backends.python.stub import conch_frames, conch_ipc


@pytest.fixture
def pool() -> conch_ipc.SegmentPool:
    created = conch_ipc.SegmentPool(f"conch-test-{os.getpid()}", default=4096, growth=4096)
    yield created
    created.close()


@pytest.mark.parametrize(
    "array",
    [
        np.arange(10, dtype=np.float16).reshape(2, 5),
        np.array([[True, False]]),
        np.arange(6, dtype=np.uint64),
        np.array([b"a", b"", b"\x00\xff"], dtype=object),
        np.array(["text", "more"], dtype=object),
        np.zeros((0, 3), dtype=np.float32),
    ],
)
def test_a_tensor_crosses_unchanged(pool: conch_ipc.SegmentPool, array: np.ndarray) -> None:
    segment, refs = pool.write([("T", array)])
    assert segment is not None
    received = conch_ipc.SegmentReader().copy(pickle.loads(pickle.dumps(refs[0])))
    assert received.shape == array.shape
    if array.dtype == object:
        assert received.tolist() == [v.encode() if isinstance(v, str) else v for v in array.tolist()]
    else:
        assert received.dtype == array.dtype
        np.testing.assert_array_equal(received, array)


def test_references_travel_as_plain_tuples(pool: conch_ipc.SegmentPool) -> None:
    _, refs = pool.write([("T", np.ones(3))])
    travelled = pickle.loads(pickle.dumps(refs[0]))
    assert type(travelled) is tuple  # unpickles where the module has another name
    assert conch_ipc.as_ref(travelled).name == "T"


def test_a_segment_left_by_a_killed_process_with_the_same_pid_is_skipped(pool: conch_ipc.SegmentPool) -> None:
    # A killed server leaves its segments in /dev/shm; a later one that gets its pid makes the same
    # names, and O_EXCL refused them (a 500 to the client). The leftover is skipped and kept.
    planted = conch_ipc.SHM_DIR / f"{pool.prefix}-1"
    planted.write_bytes(b"left over")
    try:
        name, refs = pool.write([("T", np.arange(4, dtype=np.float32))])
        assert name is not None and name != planted.name
        np.testing.assert_array_equal(conch_ipc.SegmentReader().copy(refs[0]), np.arange(4, dtype=np.float32))
        assert planted.read_bytes() == b"left over"
    finally:
        planted.unlink()


def test_segments_are_sized_in_steps_and_reused(pool: conch_ipc.SegmentPool) -> None:
    first, _ = pool.write([("T", np.zeros(100, dtype=np.float32))])
    assert first is not None and (conch_ipc.SHM_DIR / first).stat().st_size == 4096
    big, _ = pool.write([("T", np.zeros(3000, dtype=np.float32))])  # 12,000 bytes
    assert big is not None and (conch_ipc.SHM_DIR / big).stat().st_size == 12288
    pool.release(first)
    again, _ = pool.write([("T", np.zeros(10, dtype=np.float32))])
    assert again == first  # a released segment is reused


def test_segment_size_rule() -> None:
    assert conch_ipc.segment_size(1, 1 << 20, 1 << 20) == 1 << 20
    assert conch_ipc.segment_size((1 << 20) + 1, 1 << 20, 1 << 20) == 2 << 20
    assert conch_ipc.segment_size(5000, 4096, 1000) == 5096


def test_a_reader_refuses_names_that_are_paths() -> None:
    with pytest.raises(ValueError):
        conch_ipc.SegmentReader().view(conch_ipc.TensorRef("T", "FP32", (1,), "../etc/passwd", 0, 4))


def test_frames_split_whole_messages_only() -> None:
    frames = conch_frames.encode_frame({"op": "a"}) + conch_frames.encode_frame({"op": "b", "n": 2})
    buffer = bytearray(frames[:-3])
    assert conch_frames.split_frames(buffer) == [{"op": "a"}]
    buffer += frames[-3:]
    assert conch_frames.split_frames(buffer) == [{"op": "b", "n": 2}] and not buffer


def test_channel_round_trip() -> None:
    left, right = socket.socketpair()
    with left, right:
        conch_frames.Channel(left).send({"op": "x", "data": list(range(5))})
        assert conch_frames.Channel(right).receive() == {"op": "x", "data": [0, 1, 2, 3, 4]}
        left.close()
        assert conch_frames.Channel(right).receive() is None


def test_a_dropped_segment_is_forgotten_by_its_reader(pool: conch_ipc.SegmentPool) -> None:
    dropped: list[str] = []
    pool.on_drop = dropped.append
    reader = conch_ipc.SegmentReader()
    written = [pool.write([("T", np.full(10, i, dtype=np.float32))]) for i in range(conch_ipc.KEPT_FREE + 2)]
    for _, refs in written:
        reader.copy(refs[0])
    for name, _ in written:
        assert name is not None
        pool.release(name)
    assert len(dropped) == 2  # beyond the free segments kept
    for name in dropped:
        assert not (conch_ipc.SHM_DIR / name).exists()
        reader.forget(name)
    assert len(reader._maps) == conch_ipc.KEPT_FREE  # no mapping (and its descriptor) left behind


def test_a_frame_holding_a_list_gives_its_messages_one_by_one_in_order() -> None:
    frames = conch_frames.encode_frame([{"op": "a"}, {"op": "b"}]) + conch_frames.encode_frame({"op": "c"})
    buffer = bytearray(frames)
    assert conch_frames.split_frames(buffer) == [{"op": "a"}, {"op": "b"}, {"op": "c"}] and not buffer
