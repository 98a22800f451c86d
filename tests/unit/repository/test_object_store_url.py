"""``s3://`` URLs as Triton reads them, the keys the mirror refuses, and the sync decisions, without a
store."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.repository.object_cache import cache_folder
from conch.repository.object_store import (
    ObjectStoreError,
    ObjectStoreLocationError,
    S3Location,
    parse_s3_url,
    relative_path,
)
from conch.repository.sync_plan import group_of, plan_sync


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket", S3Location("bucket", "")),
        ("s3://bucket/", S3Location("bucket", "")),
        ("s3://bucket/models", S3Location("bucket", "models")),
        ("s3://bucket//team/models/", S3Location("bucket", "team/models")),
        ("s3://minio:9000/bucket/models", S3Location("bucket", "models", "http://minio:9000")),
        ("s3://127.0.0.1:9000/bucket", S3Location("bucket", "", "http://127.0.0.1:9000")),
        ("s3://http://minio.local:80/b.1-x/m", S3Location("b.1-x", "m", "http://minio.local:80")),
        ("s3://https://store.example:443/bucket/p", S3Location("bucket", "p", "https://store.example:443")),
        # Without a numeric port the first segment is the bucket, as in Triton.
        ("s3://my.bucket.example/models", S3Location("my.bucket.example", "models")),
    ],
)
def test_triton_url_forms(url: str, expected: S3Location) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "names no bucket"),
        ("s3://minio:9000", "names no bucket"),
        ("s3://minio:9000/", "names no bucket"),
        ("s3://https://bucket/models", "an endpoint is written"),
        ("s3://Bucket/models", "is not a bucket name"),
        ("s3://ab/models", "is not a bucket name"),
        ("s3://host:port/bucket", "is not a bucket name"),
        ("/models", "is not an s3:// URL"),
    ],
)
def test_malformed_urls_are_refused_as_bad_arguments(url: str, message: str) -> None:
    with pytest.raises(ObjectStoreLocationError, match=message) as raised:
        parse_s3_url(url)
    assert raised.value.exit_status == 2


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/models",
        "s3://minio:9000/bucket/models",
        "s3://https://minio:9000/bucket/models",
        "s3://b3x",
    ],
)
def test_a_location_prints_as_the_url_it_came_from(url: str) -> None:
    assert str(parse_s3_url(url)) == url


@pytest.mark.parametrize(
    "key",
    [
        "models/m/1/../../../etc/passwd",
        "models/../outside",
        "models//etc/passwd",
        "models/m/./1/model.onnx",
        "models/m/1/..",
        "models/m\\..\\x",
        "models/m/1/a\0b",
    ],
)
def test_keys_that_would_leave_the_cache_are_refused(key: str) -> None:
    with pytest.raises(ObjectStoreError, match="refusing object key"):
        relative_path(key, S3Location("bucket", "models"))


def test_a_key_becomes_its_path_below_the_prefix() -> None:
    assert relative_path("models/m/1/model.onnx", S3Location("bucket", "models")) == "m/1/model.onnx"
    assert relative_path("m/config.pbtxt", S3Location("bucket", "")) == "m/config.pbtxt"


def test_each_endpoint_bucket_and_prefix_has_its_own_cache_folder() -> None:
    base = Path("/cache")
    folders = {
        cache_folder(parse_s3_url(url), base)
        for url in ("s3://bucket/a", "s3://bucket/b", "s3://minio:9000/bucket/a", "s3://other/a")
    }
    assert len(folders) == 4
    assert cache_folder(parse_s3_url("s3://bucket/a"), base).parent == base / "bucket"


def test_groups_are_version_folders_or_a_models_own_files() -> None:
    assert group_of("m/1/model.onnx") == ("m", "1")
    assert group_of("m/12/sub/data.bin") == ("m", "12")
    assert group_of("m/config.pbtxt") == ("m",)
    assert group_of("m/warmup/sample") == ("m",)
    assert group_of("README") == ()


def test_plan_holds_a_change_until_two_listings_agree() -> None:
    mirrored = {"m/1/model.onnx": ("e1", 1)}
    listed = {"m/1/model.onnx": ("e1", 1), "m/2/model.onnx": ("e2", 2)}
    first = plan_sync(listed, mirrored, previous=mirrored)
    assert first.held == {("m", "2")} and first.place == {}
    second = plan_sync(listed, mirrored, previous=listed)
    assert second.place == {("m", "2"): {"m/2/model.onnx": ("e2", 2)}} and second.held == set()
    assert plan_sync(listed, mirrored, previous=None).place == second.place


def test_plan_removes_at_once_and_skips_what_is_mirrored() -> None:
    mirrored = {"m/1/model.onnx": ("e1", 1), "m/2/model.onnx": ("e2", 2), "m/config.pbtxt": ("c", 1)}
    listed = {"m/1/model.onnx": ("e1", 1), "m/config.pbtxt": ("c", 1)}
    plan = plan_sync(listed, mirrored, previous=mirrored)
    assert plan.remove == {("m", "2")} and plan.place == {} and plan.held == set()


def test_a_new_model_is_held_whole_while_any_part_of_it_changes() -> None:
    previous = {"n/config.pbtxt": ("c", 1), "n/1/model.onnx": ("old", 1)}
    listed = {"n/config.pbtxt": ("c", 1), "n/1/model.onnx": ("new", 2)}
    plan = plan_sync(listed, {}, previous=previous)
    assert plan.place == {} and plan.held == {("n",), ("n", "1")}
