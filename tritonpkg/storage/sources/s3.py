"""S3 and S3-compatible stores through botocore (boto3's core): endpoint, region and credentials come
from the standard AWS environment and config (AWS_ENDPOINT_URL, AWS_PROFILE, ...). Ranged GETs carry
If-Match on the listed ETag, so an object replaced mid-copy is refused instead of being stitched from
two versions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import cache
from typing import Any

from tritonpkg.storage.errors import SourceChangedError, StorageError
from tritonpkg.storage.objects import RemoteFile
from tritonpkg.storage.sources import CHUNK

_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
_CHANGED = {"PreconditionFailed", "412", "NoSuchKey", "404", "NoSuchVersion"}
BODY_ATTEMPTS = 5  # s3transfer's own number for downloads


def _body_errors() -> tuple[type[BaseException], ...]:
    """What a response body raises when the connection fails while it streams."""
    from botocore import exceptions as bx
    from urllib3 import exceptions as ux

    return (bx.ResponseStreamingError, bx.ReadTimeoutError, bx.IncompleteReadError, bx.ConnectionClosedError,
            ux.ProtocolError, ux.ReadTimeoutError, ConnectionError, TimeoutError)


def parse_url(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise StorageError("no bucket in the S3 URL", field=url, expected="s3://bucket/prefix")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


class S3Source:
    def __init__(self, url: str, *, concurrency: int = 8, client=None) -> None:
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        self.client = client or _client(concurrency)
        self.versions: dict[str, str] = {}  # key -> VersionId seen in GET responses (versioned buckets)

    def default_name(self) -> str:
        return self.prefix.rstrip("/").rsplit("/", 1)[-1] or self.bucket

    def revision(self) -> str | None:
        return None

    def list_files(self) -> list[RemoteFile]:
        files = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"]
                    if key.endswith("/"):
                        continue  # folder marker
                    files.append(RemoteFile(path=key[len(self.prefix):], key=key, size=obj["Size"],
                                            etag=obj.get("ETag", "").strip('"') or None))
        except Exception as exc:
            raise translate(exc, self.url, "list") from exc
        if not files:
            raise StorageError(f"no objects under {self.url}", field="SOURCE",
                               expected="a prefix holding the model files (check the prefix spelling)")
        return files

    def read(self, f: RemoteFile, start: int, end: int) -> Iterator[bytes]:
        """Stream the range; a body cut off mid-way (reset, timeout, short read) is picked up with a new
        ranged GET from the first missing byte, If-Match on the listed ETag, up to BODY_ATTEMPTS times.
        botocore retries a request until its headers arrive, not the body it is streaming."""
        url = f"s3://{self.bucket}/{f.key}"
        received, failures = 0, 0
        while True:
            body = self._get(f, start + received, end, url)["Body"]  # botocore's StreamingBody checks the length
            try:
                while received < end - start:
                    chunk = body.read(min(CHUNK, end - start - received))
                    if not chunk:
                        break
                    received += len(chunk)
                    yield chunk
                if received == end - start:
                    return
                raise SourceChangedError(f"{url}: got {received} bytes for range {start}-{end - 1}",
                                         expected="the object size listed at the start")
            except _body_errors() as exc:
                failures += 1
                if failures >= BODY_ATTEMPTS:
                    raise StorageError(f"S3 read of {url} failed {failures} times mid-body, last: {exc}",
                                       expected="a stable connection to the endpoint; rerun to resume") from exc
                time.sleep(min(2.0, 0.1 * 2 ** failures))
            finally:
                body.close()

    def _get(self, f: RemoteFile, start: int, end: int, url: str):
        kwargs = {"Bucket": self.bucket, "Key": f.key, "Range": f"bytes={start}-{end - 1}"}
        if f.etag:
            kwargs["IfMatch"] = f'"{f.etag}"'
        if f.version_id:
            kwargs["VersionId"] = f.version_id
        try:
            response = self.client.get_object(**kwargs)
        except Exception as exc:
            raise translate(exc, url, "read") from exc
        version = response.get("VersionId")
        if version and version != "null" and self.versions.setdefault(f.key, version) != version:
            raise SourceChangedError(f"{url} changed version during the copy ({self.versions[f.key]} -> {version})",
                                     expected="an unchanged source; rerun")
        return response

    def version_of(self, f: RemoteFile) -> str | None:
        return f.version_id or self.versions.get(f.key)

    def close(self) -> None:
        self.client.close()


@cache
def _data_loader() -> Any:
    """botocore's data loader, made once per process: it caches the service models it has loaded."""
    import botocore.session  # botocore loads only once an s3:// source is opened

    return botocore.session.Session().get_component("data_loader")


def _client(concurrency: int) -> Any:
    """A fresh botocore session (credentials and endpoint read from the environment now) sharing one data
    loader: loading the S3 service model again costs ~0.2 s per session. botocore alone: boto3's resource
    layer and s3transfer are unused here and cost ~40 ms of import."""
    import botocore.session  # as in _data_loader
    from botocore.config import Config

    core = botocore.session.Session()
    core.register_component("data_loader", _data_loader())
    config = Config(max_pool_connections=max(10, concurrency + 2), retries={"max_attempts": 5, "mode": "standard"},
                    tcp_keepalive=True)
    return core.create_client("s3", config=config)


def translate(exc: Exception, url: str, action: str) -> Exception:
    """A botocore failure as a StorageError that says what to fix."""
    from botocore import exceptions as bx

    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return StorageError(f"no AWS credentials found to {action} {url}",
                            expected="AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                                     "or an instance/role profile")
    if isinstance(exc, bx.EndpointConnectionError):
        return StorageError(f"cannot reach the S3 endpoint to {action} {url}: {exc}",
                            expected="a reachable endpoint (check AWS_ENDPOINT_URL, AWS_REGION and the network)")
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code == "NoSuchBucket":
            return StorageError(f"bucket {err.get('BucketName') or url.removeprefix('s3://').split('/')[0]!r} "
                                f"does not exist ({url})", expected="an existing bucket (check the name and endpoint)")
        if code in _BAD_CREDENTIALS:
            return StorageError(f"the S3 endpoint rejected the credentials ({code}) to {action} {url}",
                                expected="valid AWS credentials for this endpoint")
        if code in _DENIED or (status == "403" and code not in _CHANGED):
            need = "s3:ListBucket on the bucket" if action == "list" else "s3:GetObject on the objects"
            return StorageError(f"access denied to {action} {url}", expected=f"a policy granting {need}")
        if code in _CHANGED or (action == "read" and status in ("404", "412")):
            return SourceChangedError(f"{url} changed or disappeared during the copy ({code})",
                                      expected="a source that stays unchanged until the copy ends; rerun to copy "
                                               "the new version")
        return StorageError(f"S3 {action} of {url} failed: {code or status} {err.get('Message', '')}".rstrip())
    if isinstance(exc, bx.BotoCoreError):
        return StorageError(f"S3 {action} of {url} failed: {exc}")
    return exc
