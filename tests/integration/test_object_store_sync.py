"""The model cache of an ``s3://`` repository against moto's S3 server: what the first sync mirrors, what
later syncs download and remove, what poll mode's ``refresh()`` holds back, the keys it refuses, and
poll mode's own scan (``ModelControl.poll``) serving a version uploaded while it runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conch.lifecycle.loader import LoadOptions, ModelLoader
from conch.lifecycle.model_control import ControlMode, ControlSettings, ModelControl
from conch.models.served_models import ServedModels
from conch.repository.object_cache import ObjectStoreRepository, mirrored_from, sync
from conch.repository.object_store import ObjectStoreError, ObjectStoreLocationError
from tests.fixtures.onnx_models import add_sub_model
from tests.integration.s3_store import BUCKET, FOREIGN_AWS_VARIABLES, MotoS3, running_moto
from tests.integration.server_process import free_port


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    with running_moto(tmp_path_factory.mktemp("moto")) as store:
        yield store


@pytest.fixture(autouse=True)
def credentials(moto: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3's chain in this process finds the moto key and nothing of the machine's."""
    for name in FOREIGN_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in moto.environment(tmp_path).items():
        monkeypatch.setenv(name, value)


def upload(moto: MotoS3, prefix: str, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        moto.put(f"{prefix}/{path}", body)


def inode(path: Path) -> int:
    return path.stat().st_ino


def test_first_sync_mirrors_the_prefix_and_a_second_downloads_nothing(moto: MotoS3, tmp_path: Path) -> None:
    upload(
        moto,
        "first",
        {
            "a/config.pbtxt": b"name: 'a'",
            "a/1/model.onnx": b"one",
            "a/2/model.onnx": b"two",
            "a/2/weights/data.bin": b"data",
            "b/1/model.onnx": b"bee",
        },
    )
    moto.put("first/a/3/", b"")  # a console's folder marker: no file, no folder
    moto.put("firstborn/x/1/model.onnx", b"not under the prefix 'first/'")
    repository = ObjectStoreRepository(moto.url("first"), tmp_path / "cache")
    report = repository.sync()
    root = repository.root
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == [
        "a/1/model.onnx",
        "a/2/model.onnx",
        "a/2/weights/data.bin",
        "a/config.pbtxt",
        "b/1/model.onnx",
    ]
    assert (root / "a/2/weights/data.bin").read_bytes() == b"data"
    assert sorted(report.downloaded) == files
    before = {path: inode(root / path) for path in files}

    again = repository.sync()
    assert again.downloaded == [] and not again.changed
    assert {path: inode(root / path) for path in files} == before, "a second sync rewrote unchanged files"


def test_a_changed_file_is_downloaded_again_and_its_neighbours_are_kept(moto: MotoS3, tmp_path: Path) -> None:
    upload(moto, "changed", {"m/1/model.onnx": b"old", "m/1/extra.bin": b"same", "m/config.pbtxt": b"c1"})
    repository = ObjectStoreRepository(moto.url("changed"), tmp_path / "cache")
    repository.sync()
    root = repository.root
    kept, replaced = inode(root / "m/1/extra.bin"), inode(root / "m/1/model.onnx")

    moto.put("changed/m/1/model.onnx", b"new!")
    moto.put("changed/m/config.pbtxt", b"c2")
    report = repository.sync()
    assert sorted(report.downloaded) == ["m/1/model.onnx", "m/config.pbtxt"]
    assert (root / "m/1/model.onnx").read_bytes() == b"new!"
    assert (root / "m/config.pbtxt").read_bytes() == b"c2"
    assert inode(root / "m/1/extra.bin") == kept, "an unchanged file of a changed version was fetched again"
    assert inode(root / "m/1/model.onnx") != replaced


def test_what_leaves_the_bucket_leaves_the_cache(moto: MotoS3, tmp_path: Path) -> None:
    upload(
        moto,
        "removed",
        {
            "gone/1/model.onnx": b"g",
            "stay/1/model.onnx": b"s1",
            "stay/2/model.onnx": b"s2",
            "stay/labels": b"l",
        },
    )
    repository = ObjectStoreRepository(moto.url("removed"), tmp_path / "cache")
    repository.sync()
    for key in ("removed/gone/1/model.onnx", "removed/stay/2/model.onnx", "removed/stay/labels"):
        moto.delete(key)
    report = repository.sync()
    root = repository.root
    assert not (root / "gone").exists()
    assert not (root / "stay/2").exists()
    assert not (root / "stay/labels").exists()
    assert (root / "stay/1/model.onnx").read_bytes() == b"s1"
    assert sorted(report.removed) == ["gone", "stay/2", "stay/labels"]
    manifest = json.loads((repository.cache_dir / "manifest.json").read_text())
    assert sorted(manifest) == ["stay/1/model.onnx"]


@pytest.mark.parametrize("key", ["escape/m/1/../../../evil", "escape//absolute", "escape/m/./1/model.onnx"])
def test_a_key_that_would_leave_the_cache_is_refused(moto: MotoS3, tmp_path: Path, key: str) -> None:
    upload(moto, "escape", {"m/1/model.onnx": b"fine"})
    moto.put(key, b"planted")
    try:
        with pytest.raises(ObjectStoreError, match="refusing object key") as raised:
            sync(moto.url("escape"), tmp_path / "cache")
    finally:
        moto.delete(key)
    assert key in str(raised.value)
    planted = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"planted"]
    assert planted == []
    assert not (tmp_path / "cache" / "repository" / "m").exists(), "a refused listing mirrored nothing"


def test_a_version_that_fails_part_way_never_appears(moto: MotoS3, tmp_path: Path) -> None:
    """The first file of version 2 is downloaded, the second has gone: version 2 must not be in the
    served folder with one file, and version 1 must be untouched."""
    upload(moto, "partial", {"m/1/model.onnx": b"v1"})
    repository = ObjectStoreRepository(moto.url("partial"), tmp_path / "cache")
    repository.sync()
    upload(moto, "partial", {"m/2/a.bin": b"first", "m/2/b.bin": b"second"})
    listed = repository._list()
    moto.delete("partial/m/2/b.bin")
    with pytest.raises(ObjectStoreError, match=r"left .* while it was being mirrored"):
        repository._mirror(listed, previous=None)
    root = repository.root
    assert not (root / "m/2").exists()
    assert (root / "m/1/model.onnx").read_bytes() == b"v1"
    assert list((repository.cache_dir / "staging").glob("*")) == []

    moto.put("partial/m/2/b.bin", b"second")
    repository.sync()
    assert sorted(p.name for p in (root / "m/2").iterdir()) == ["a.bin", "b.bin"]


def test_refresh_picks_up_a_new_version_once_two_listings_agree(moto: MotoS3, tmp_path: Path) -> None:
    upload(moto, "poll", {"m/config.pbtxt": b"c", "m/1/model.onnx": b"v1"})
    started = ObjectStoreRepository(moto.url("poll"), tmp_path / "cache")
    started.sync()
    repository = mirrored_from(started.root)  # what poll mode holds: found from the served folder
    assert repository is not None and repository.root == started.root
    assert repository.refresh() is False, "nothing changed, yet refresh said it did"

    moto.put("poll/m/2/model.onnx", b"v2")  # the first file of version 2; the upload goes on
    assert repository.refresh() is False
    assert not (repository.root / "m/2").exists(), "a version still being uploaded was mirrored"
    moto.put("poll/m/2/model.onnx.data", b"weights")
    assert repository.refresh() is False
    assert not (repository.root / "m/2").exists()

    assert repository.refresh() is True
    assert (repository.root / "m/2/model.onnx").read_bytes() == b"v2"
    assert (repository.root / "m/2/model.onnx.data").read_bytes() == b"weights"
    assert repository.refresh() is False


def test_refresh_holds_a_new_model_until_all_of_it_has_settled(moto: MotoS3, tmp_path: Path) -> None:
    upload(moto, "newmodel", {"old/1/model.onnx": b"o"})
    repository = ObjectStoreRepository(moto.url("newmodel"), tmp_path / "cache")
    repository.sync()
    moto.put("newmodel/fresh/config.pbtxt", b"c")
    moto.put("newmodel/fresh/1/model.onnx", b"f")
    assert repository.refresh() is False
    moto.put("newmodel/fresh/1/model.onnx", b"f, uploaded again")
    assert repository.refresh() is False
    assert not (repository.root / "fresh").exists(), "a model appeared with a version still changing"
    assert repository.refresh() is True
    assert (repository.root / "fresh/1/model.onnx").read_bytes() == b"f, uploaded again"
    assert (repository.root / "fresh/config.pbtxt").read_bytes() == b"c"


def test_refresh_removes_a_deleted_version_at_once(moto: MotoS3, tmp_path: Path) -> None:
    upload(moto, "unpoll", {"m/1/model.onnx": b"1", "m/2/model.onnx": b"2"})
    repository = ObjectStoreRepository(moto.url("unpoll"), tmp_path / "cache")
    repository.sync()
    moto.delete("unpoll/m/2/model.onnx")
    assert repository.refresh() is True
    assert not (repository.root / "m/2").exists()


def test_mirrored_from_an_ordinary_folder_is_none(tmp_path: Path) -> None:
    (tmp_path / "repository").mkdir()
    assert mirrored_from(tmp_path / "repository") is None


def test_an_empty_prefix_a_missing_bucket_and_bad_credentials_are_named(
    moto: MotoS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        ObjectStoreLocationError, match=r"no objects under s3://127\.0\.0\.1:\d+/conch-models/nothing"
    ):
        sync(moto.url("nothing"), tmp_path / "a")
    with pytest.raises(ObjectStoreLocationError, match="bucket 'no-such-bucket' does not exist"):
        sync(moto.url("models", bucket="no-such-bucket"), tmp_path / "b")
    upload(moto, "secret", {"m/1/model.onnx": b"x"})
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-0123456789")
    with pytest.raises(ObjectStoreError, match="refused the credentials") as raised:
        sync(moto.url("secret"), tmp_path / "c")
    assert raised.value.exit_status == 1
    assert "not-the-secret" not in str(raised.value)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(ObjectStoreError, match="no credentials"):
        sync(moto.url("secret"), tmp_path / "d")


def test_an_endpoint_nobody_listens_on_is_named(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(
        ObjectStoreError, match=rf"cannot reach the object store at http://127\.0\.0\.1:{port}"
    ):
        sync(f"s3://127.0.0.1:{port}/{BUCKET}/models", tmp_path / "cache")


def test_a_poll_scan_after_poll_refresh_serves_the_new_version(moto: MotoS3, tmp_path: Path) -> None:
    """Poll mode's own loop (ModelControl.poll) with the store's refresh as its ``before_scan``: the
    version uploaded to the bucket is the one served after the scans that follow."""
    onnx_bytes = add_sub_model().SerializeToString(deterministic=True)
    config = b'name: "add-sub"\nbackend: "onnxruntime"\nversion_policy { latest { num_versions: 1 } }\n'
    upload(moto, "served", {"add-sub/config.pbtxt": config, "add-sub/1/model.onnx": onnx_bytes})
    started = ObjectStoreRepository(moto.url("served"), tmp_path / "cache")
    started.sync()
    store = mirrored_from(started.root)
    assert store is not None
    repository = ServedModels(store.root)
    settings = ControlSettings(mode=ControlMode.POLL, poll_secs=0.1, settle_secs=0.05)
    control = ModelControl(repository, ModelLoader(LoadOptions(cpu_cores=1)), settings)
    control.before_scan = store.poll_refresh
    control.load_startup()
    assert sorted(repository.model("add-sub").versions) == [1]

    async def scans(count: int) -> None:
        for _ in range(count):
            await control.poll()
        await control.drained()

    moto.put("served/add-sub/2/model.onnx", onnx_bytes)
    asyncio.run(scans(1))
    assert sorted(repository.model("add-sub").versions) == [1], "a version not yet settled was served"
    asyncio.run(scans(2))
    served = repository.model("add-sub").versions
    assert sorted(served) == [2] and served[2].ready, served
    moto.put("served/add-sub/2/model.onnx", b"broken")  # a bad upload is logged, the mirror kept
    moto.delete("served/add-sub/config.pbtxt")
    moto.put("served/add-sub/../escape", b"x")
    try:
        assert store.poll_refresh() is False
    finally:
        moto.delete("served/add-sub/../escape")
    assert (store.root / "add-sub/2/model.onnx").read_bytes() == onnx_bytes
