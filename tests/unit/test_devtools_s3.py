"""The moto launcher the tests and benches share: a real S3 API that answers boto3, and nothing left running
once it is stopped."""

from __future__ import annotations

from pathlib import Path

from tests.support.procs import group_pids
from tritonpkg.devtools.s3 import MotoS3


def test_moto_answers_boto3_and_its_process_group_ends_with_it(tmp_path: Path) -> None:
    with MotoS3.start(tmp_path / "moto.log") as server:
        s3 = server.client()
        s3.create_bucket(Bucket="launcher-check")
        s3.put_object(Bucket="launcher-check", Key="a/b.txt", Body=b"hello")
        assert s3.get_object(Bucket="launcher-check", Key="a/b.txt")["Body"].read() == b"hello"
        assert server.env["AWS_ENDPOINT_URL"] == server.endpoint
        pgid = server.proc.pid
        assert group_pids(pgid)
    assert group_pids(pgid) == []
