"""Helpers for uploading export files to S3 (partner drops, lake writes).

Credentials come from the default boto3 chain (instance profile on workers,
SSO profile on laptops). Nothing here accepts keys as arguments on purpose.

Note from INC-2307: long-running processes cache credentials. ``S3Uploader``
creates its client lazily and exposes :meth:`S3Uploader.reset_client` so a
SIGHUP handler can force a refresh after a key rotation.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from dataclasses import dataclass
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError, EndpointConnectionError
from retry import retry

log = logging.getLogger(__name__)

MB = 1024 * 1024
DEFAULT_TRANSFER = TransferConfig(multipart_threshold=64 * MB, multipart_chunksize=16 * MB, max_concurrency=8)


def md5_base64(path: Path, chunk: int = 8 * MB) -> str:
    """Content-MD5 header value for single-part uploads."""
    import base64

    h = hashlib.md5()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return base64.b64encode(h.digest()).decode()


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` → ``("bucket", "some/key")``."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3 uri: {uri}")
    bucket, _, key = uri[5:].partition("/")
    if not bucket or not key:
        raise ValueError(f"s3 uri needs bucket and key: {uri}")
    return bucket, key


@dataclass
class UploadResult:
    bucket: str
    key: str
    size: int
    etag: str


class S3Uploader:
    """Upload files with retries, server-side encryption and a completion marker.

    Args:
        profile: optional AWS profile name (laptops); ``None`` on servers.
        sse_kms_key: KMS key alias for SSE-KMS; partners' buckets require it.
        acl: canned ACL, e.g. ``bucket-owner-full-control`` for cross-account drops.
    """

    def __init__(self, profile: str | None = None, sse_kms_key: str | None = None,
                 acl: str | None = "bucket-owner-full-control") -> None:
        self.profile = profile
        self.sse_kms_key = sse_kms_key
        self.acl = acl
        self._client = None

    @property
    def client(self):
        if self._client is None:
            session = boto3.Session(profile_name=self.profile)
            self._client = session.client("s3")
        return self._client

    def reset_client(self) -> None:
        """Drop the cached client so the next call re-resolves credentials."""
        self._client = None

    def _extra_args(self, path: Path) -> dict[str, str]:
        extra: dict[str, str] = {}
        ctype, encoding = mimetypes.guess_type(path.name)
        if ctype:
            extra["ContentType"] = ctype
        if encoding:
            extra["ContentEncoding"] = encoding
        if self.acl:
            extra["ACL"] = self.acl
        if self.sse_kms_key:
            extra["ServerSideEncryption"] = "aws:kms"
            extra["SSEKMSKeyId"] = self.sse_kms_key
        return extra

    @retry(attempts=4, base=1.0, retry_on=(EndpointConnectionError, ConnectionError, TimeoutError))
    def upload(self, path: Path, uri: str) -> UploadResult:
        """Upload one file. Raises ``ClientError`` immediately on 4xx (no retry)."""
        bucket, key = split_s3_uri(uri)
        size = path.stat().st_size
        log.info("uploading %s (%.1f MB) to s3://%s/%s", path, size / MB, bucket, key)
        try:
            self.client.upload_file(str(path), bucket, key, ExtraArgs=self._extra_args(path),
                                    Config=DEFAULT_TRANSFER)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in {"AccessDenied", "InvalidAccessKeyId"}:
                log.error("S3 %s for s3://%s/%s — rotated keys? see INC-2307", code, bucket, key)
            raise
        head = self.client.head_object(Bucket=bucket, Key=key)
        return UploadResult(bucket, key, size, head["ETag"].strip('"'))

    def upload_with_marker(self, files: list[Path], prefix_uri: str) -> list[UploadResult]:
        """Upload files then write ``_SUCCESS`` so consumers know the drop is complete."""
        prefix_uri = prefix_uri.rstrip("/")
        results = [self.upload(f, f"{prefix_uri}/{f.name}") for f in files]
        bucket, key = split_s3_uri(f"{prefix_uri}/_SUCCESS")
        self.client.put_object(Bucket=bucket, Key=key, Body=b"", **({"ACL": self.acl} if self.acl else {}))
        return results
