"""Where an ``s3://`` model repository lives, and the three calls conch makes to it: list, download, and
the translation of what can go wrong into one line a user can act on.

The URL forms are Triton's (``core/src/filesystem/implementations/s3.h``):

- ``s3://bucket/prefix``: AWS S3, or whatever endpoint boto3's own settings name (``AWS_ENDPOINT_URL``,
  ``AWS_ENDPOINT_URL_S3``, ``endpoint_url`` in ``~/.aws/config``);
- ``s3://host:port/bucket/prefix``: an S3-compatible store such as MinIO, over http, or
  ``s3://https://host:port/bucket/prefix`` over https. The first segment is an endpoint exactly when it
  is ``host:port`` with a numeric port; a bucket name can hold no colon, so the two never collide.

Credentials are boto3's standard chain (environment, ``AWS_PROFILE``, config and credentials files,
container and instance roles); conch adds none of its own, so nothing secret passes through its flags.
Mirroring the objects into a local folder is :mod:`conch.repository.object_cache`'s job.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

log = logging.getLogger(__name__)
# botocore says where it found credentials at INFO, a line before any error of ours; conch says it at
# debug level instead (see connect).
logging.getLogger("botocore.credentials").setLevel(logging.WARNING)

SCHEME = "s3://"
_ENDPOINT = re.compile(r"(?P<host>[0-9A-Za-z.\-]+):(?P<port>[0-9]+)")
# S3's rule for bucket names (3 to 63 lowercase letters, digits, dots and hyphens), which Triton's
# endpoint pattern also assumes.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_REFUSED_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "InvalidClientTokenId",
    "AuthorizationHeaderMalformed",
}


class ObjectStoreError(Exception):
    """An ``s3://`` repository cannot be read. The message is one line for the user and never holds a
    credential; ``exit_status`` is what ``conch serve`` exits with (1: the store or the credentials)."""

    exit_status = 1


class ObjectStoreLocationError(ObjectStoreError):
    """What the URL names is malformed or not there (no such bucket, nothing under the prefix): the
    argument is wrong, so ``conch serve`` exits 2, as for a local path that is not a folder."""

    exit_status = 2


@dataclass(frozen=True)
class S3Location:
    """A bucket, a key prefix in it (no leading or trailing slash; empty for the whole bucket) and the
    endpoint that serves it (None: boto3's default, AWS or ``AWS_ENDPOINT_URL``)."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None

    @property
    def key_prefix(self) -> str:
        """The prefix every listed key starts with: ``models/`` for ``s3://bucket/models``."""
        return f"{self.prefix}/" if self.prefix else ""

    def __str__(self) -> str:
        endpoint = ""
        if self.endpoint_url:
            scheme, _, address = self.endpoint_url.partition("://")
            endpoint = address + "/" if scheme == "http" else self.endpoint_url + "/"
        return f"{SCHEME}{endpoint}{self.bucket}/{self.prefix}".rstrip("/")


def is_s3_url(text: str) -> bool:
    """Whether a repository argument names object storage rather than a folder."""
    return text.startswith(SCHEME)


def parse_s3_url(url: str) -> S3Location:
    """``s3://[http[s]://host:port/]bucket[/prefix]`` as a location; repeated slashes collapse, as in
    Triton. Raises :class:`ObjectStoreLocationError` for anything else."""
    if not is_s3_url(url):
        raise ObjectStoreLocationError(f"'{url}' is not an s3:// URL")
    rest = url[len(SCHEME) :]
    scheme = ""
    for candidate in ("https", "http"):
        if rest.startswith(f"{candidate}://"):
            scheme, rest = candidate, rest[len(candidate) + 3 :]
            break
    parts = [part for part in rest.split("/") if part]
    endpoint_url = None
    if parts and _ENDPOINT.fullmatch(parts[0]):
        endpoint_url = f"{scheme or 'http'}://{parts.pop(0)}"
    elif scheme:
        raise ObjectStoreLocationError(f"'{url}': an endpoint is written s3://{scheme}://host:port/bucket")
    if not parts:
        raise ObjectStoreLocationError(f"'{url}' names no bucket: write s3://bucket/prefix")
    bucket = parts[0]
    if not _BUCKET.fullmatch(bucket):
        raise ObjectStoreLocationError(
            f"'{bucket}' in '{url}' is not a bucket name (3 to 63 lowercase letters, digits, '.' or '-')"
        )
    return S3Location(bucket, "/".join(parts[1:]), endpoint_url)


@dataclass(frozen=True)
class StoredObject:
    """One object under the prefix, as the listing describes it: enough to tell whether it changed."""

    key: str
    etag: str
    size: int


def connect(location: S3Location) -> Any:
    """An S3 client for ``location``, with credentials from boto3's chain. An explicit endpoint gets
    path-style addressing, as Triton's client uses: MinIO and most S3-compatible stores need it."""
    config = botocore.config.Config(
        connect_timeout=5,
        read_timeout=60,
        retries={"max_attempts": 3, "mode": "standard"},
        s3={"addressing_style": "path"} if location.endpoint_url else None,
    )
    with translated_errors(location):
        session = boto3.session.Session()
        credentials = session.get_credentials()
        log.debug(
            "reading %s with credentials from %s", location, credentials.method if credentials else "nowhere"
        )
        return session.client("s3", endpoint_url=location.endpoint_url, config=config)


def list_objects(client: Any, location: S3Location) -> dict[str, StoredObject]:
    """Every object under the prefix by its path relative to it (``model/1/model.onnx``). Keys ending in
    ``/`` are the folder markers consoles create and are skipped; a key that would leave the folder it
    is mirrored into is refused, whole listing and all (see :func:`relative_path`)."""
    found: dict[str, StoredObject] = {}
    with translated_errors(location):
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=location.key_prefix
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith("/"):
                    continue
                relative = relative_path(key, location)
                found[relative] = StoredObject(key, str(item["ETag"]), int(item["Size"]))
    return found


def relative_path(key: str, location: S3Location) -> str:
    """The path a key is mirrored to, relative to the cache folder. A key whose remainder is absolute or
    holds ``.``, ``..``, an empty segment, a backslash or a NUL would write outside that folder or
    somewhere other than it says: it is refused (the CVE-2023-31036 class of path traversal)."""
    relative = key[len(location.key_prefix) :]
    parts = relative.split("/")
    if any(part in ("", ".", "..") or "\\" in part or "\0" in part for part in parts):
        raise ObjectStoreError(
            f"refusing object key '{key}' in {location}: it would be written outside the model cache"
        )
    return PurePosixPath(*parts).as_posix()


def download(client: Any, location: S3Location, stored: StoredObject, destination: Path) -> None:
    """Fetch one object into ``destination`` (a file in the staging folder, never a served one)."""
    with translated_errors(location, stored.key):
        client.download_file(location.bucket, stored.key, str(destination))
    if destination.stat().st_size != stored.size:
        raise ObjectStoreError(
            f"object '{stored.key}' in {location} changed while it was downloaded; the next sync retries"
        )


@contextlib.contextmanager
def translated_errors(location: S3Location, key: str | None = None) -> Iterator[None]:
    """Turn boto3's exceptions into an :class:`ObjectStoreError` with one line naming the cause. The
    store's own message is left out: it can quote request details, and the error code says enough."""
    where = location.endpoint_url or "the default S3 endpoint"
    try:
        yield
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError):
        raise ObjectStoreError(
            f"no credentials to read {location}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, or ~/.aws/credentials (boto3's standard chain)"
        ) from None
    except botocore.exceptions.ProfileNotFound as exc:
        raise ObjectStoreError(f"AWS profile '{exc.kwargs.get('profile')}' is not configured") from None
    except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError):
        raise ObjectStoreError(f"cannot reach the object store at {where} to read {location}") from None
    except botocore.exceptions.ClientError as exc:
        raise _client_error(exc, location, key) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise ObjectStoreError(f"cannot read {location} from {where}: {type(exc).__name__}") from None


def _client_error(
    exc: botocore.exceptions.ClientError, location: S3Location, key: str | None
) -> ObjectStoreError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "unknown"))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code == "NoSuchBucket":
        return ObjectStoreLocationError(f"bucket '{location.bucket}' does not exist ({location})")
    if key is not None and (code in ("NoSuchKey", "404") or status == 404):
        return ObjectStoreError(
            f"object '{key}' left {location} while it was being mirrored; the next sync retries"
        )
    if code in _REFUSED_CREDENTIALS:
        return ObjectStoreError(
            f"the object store refused the credentials for {location} ({code}): check AWS_ACCESS_KEY_ID "
            "and AWS_SECRET_ACCESS_KEY, or the profile"
        )
    if code == "AccessDenied" or status == 403:
        return ObjectStoreError(f"access denied to {location} ({code}): the credentials may not read it")
    return ObjectStoreError(f"the object store answered {code} (HTTP {status}) for {location}")
