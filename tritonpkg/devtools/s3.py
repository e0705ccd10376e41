"""A real S3 API on loopback: moto's own server in its own process group, reached through boto3 with an
endpoint URL and dummy credentials, exactly as a remote S3-compatible store is."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.proc.group import own_group, stop_popen
from tritonpkg.proc.logtail import tail
from tritonpkg.proc.ports import free_port
from tritonpkg.proc.rest import ok

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


class MotoS3:
    """`moto.server` on a free loopback port. `env` is what a client process needs to reach it (the
    endpoint, dummy credentials, no instance-metadata lookups)."""

    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str) -> None:
        self.proc = proc
        self.endpoint = endpoint
        self.env = {"AWS_ENDPOINT_URL": endpoint, **CREDENTIALS, "AWS_EC2_METADATA_DISABLED": "true"}

    @classmethod
    def start(cls, log: Path, timeout: float = 30.0) -> MotoS3:
        """Start the server, writing its output to `log`; return once it answers, or stop it and raise
        with the log's tail when it exits or `timeout` s pass first."""
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT, **own_group())
        server = cls(proc, f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + timeout
        while not ok(server.endpoint + "/moto-api/"):
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeSetupError(
                    f"moto's S3 server did not answer within {timeout:g} s:\n{tail(log, 40)}",
                    file=log, expected="moto[server] installed (the dev extra: pip install -e '.[dev]')")
            time.sleep(0.1)
        return server

    def client(self) -> Any:  # boto3 builds its client classes at run time and ships no type stubs
        import boto3  # imported here: a bench that only hands `env` to a child process never pays for it

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                            region_name=CREDENTIALS["AWS_DEFAULT_REGION"])

    def stop(self) -> None:
        stop_popen(self.proc)

    def __enter__(self) -> MotoS3:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
