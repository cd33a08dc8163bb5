"""S3 fixtures: a real ``moto_server`` subprocess on a free loopback port, spoken to over HTTP.

- ``moto_server``: the endpoint configured through boto3's own variables (AWS_ENDPOINT_URL,
  dummy AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, no config files) and a
  fresh, empty bucket for this test. The server process is shared by the session (it takes
  seconds to start); every test gets its own bucket, so tests never see each other's objects.
- ``start_moto`` (a plain function) starts a PRIVATE server, for tests that kill it.
- ``SilentServer``: a TCP server that accepts and never answers, i.e. a hung S3 endpoint.

``tests/conftest.py`` registers the fixtures for every test folder; helpers are imported from
here (``from tests.s3_fixtures import MotoS3, start_moto``).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Dummy, test-only values (moto accepts anything). The secret is distinctive so that tests can
# search logs and output for it.
TEST_ACCESS_KEY_ID = "AKIALAKETRAINTEST0001"
TEST_SECRET_ACCESS_KEY = "lt-test-secret-DO-NOT-LOG-9f3b2c"
TEST_REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoProcess:
    """A running moto_server subprocess."""

    proc: subprocess.Popen
    endpoint: str

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_moto(timeout_s: float = 60.0) -> MotoProcess:
    """Start ``moto_server`` from this interpreter's venv on a free loopback port; wait until
    it answers HTTP."""
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.fail(f"moto_server not found beside {sys.executable}: pip install 'moto[server]'")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"moto_server exited with {proc.returncode} before answering on {endpoint}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return MotoProcess(proc, endpoint)
        except urllib.error.HTTPError:  # any HTTP answer means it is serving
            return MotoProcess(proc, endpoint)
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto_server did not answer on {endpoint} within {timeout_s:.0f}s")
            time.sleep(0.1)


def set_aws_env(monkeypatch: pytest.MonkeyPatch, endpoint: str, tmp_path: Path) -> None:
    """Point boto3 at ``endpoint`` through its own variables, isolated from ~/.aws."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", TEST_REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for var in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)


@dataclass
class MotoS3:
    """What a test gets: the endpoint, its own bucket, and ``url`` = ``s3://<bucket>``."""

    endpoint: str
    bucket: str
    process: MotoProcess
    _client: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}"

    @property
    def client(self) -> Any:
        """A boto3 S3 client for the test's own checks (built from the same env variables)."""
        if self._client is None:
            import boto3

            self._client = boto3.session.Session().client("s3")
        return self._client

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def new_bucket(self) -> str:
        name = f"lt-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=name)
        return name


class SilentServer:
    """A real TCP server on loopback that accepts every connection and never answers: what a
    hung S3 endpoint looks like to boto3. Counts the connections it was offered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections: list[Any] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)  # held open, never read from or written to

    def close(self) -> None:
        # shutdown first: a bare close leaves the socket listening under the blocked accept().
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture(scope="session")
def _moto_process() -> Iterator[MotoProcess]:
    server = start_moto()
    yield server
    # SIGKILL: it holds nothing worth saving, and a graceful exit with thousands of test
    # buckets in memory took up to 28 s of the last worker's time.
    server.stop(signal.SIGKILL)


@pytest.fixture
def moto_server(
    _moto_process: MotoProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[MotoS3]:
    """boto3 configured (via AWS_* env) for a real moto_server, with a fresh empty bucket."""
    if _moto_process.proc.poll() is not None:
        pytest.fail("the shared moto_server died (a test must stop only its own start_moto server)")
    set_aws_env(monkeypatch, _moto_process.endpoint, tmp_path)
    s3 = MotoS3(endpoint=_moto_process.endpoint, bucket="", process=_moto_process)
    s3.bucket = s3.new_bucket()
    yield s3


@pytest.fixture
def private_moto_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[MotoS3]:
    """Like ``moto_server`` but on a server of this test's own, which the test may kill."""
    server = start_moto()
    try:
        set_aws_env(monkeypatch, server.endpoint, tmp_path)
        s3 = MotoS3(endpoint=server.endpoint, bucket="", process=server)
        s3.bucket = s3.new_bucket()
        yield s3
    finally:
        server.stop()


__all__ = [
    "TEST_ACCESS_KEY_ID",
    "TEST_SECRET_ACCESS_KEY",
    "MotoProcess",
    "MotoS3",
    "SilentServer",
    "set_aws_env",
    "start_moto",
]
