"""A recording HTTP proxy in front of a moto_server: every request laketrain makes, logged.

Pointing ``AWS_ENDPOINT_URL`` at :class:`RecordingProxy` makes every boto3 client, in this
process and in any subprocess it starts, talk through it, so a test can assert exactly which
S3 operations were sent (``ops()``): a no-change rescan made no GetObject; the lake bucket saw
only LIST, HEAD and GET. It is a plain reverse proxy on a free loopback port; requests go on to
the real server unchanged.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


@dataclass(frozen=True)
class Request:
    method: str
    bucket: str
    key: str
    query: dict[str, list[str]]

    @property
    def op(self) -> str:
        """The S3 operation, as far as the tests need to tell them apart."""
        q = self.query
        if self.method == "GET":
            if not self.key:
                if q.get("list-type") == ["2"]:
                    return "ListObjectsV2"
                if "versions" in q:
                    return "ListObjectVersions"
                if "versioning" in q:
                    return "GetBucketVersioning"
                return "ListObjects" if not q else "GetBucket?" + "&".join(sorted(q))
            return "GetObject"
        if self.method == "HEAD":
            return "HeadObject" if self.key else "HeadBucket"
        if self.method == "PUT":
            return "PutObject" if self.key else "PutBucket?" + "&".join(sorted(q))
        if self.method == "DELETE":
            return "DeleteObject" if self.key else "DeleteBucket"
        if self.method == "POST":
            return "Post?" + "&".join(sorted(q))
        return self.method


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.requests: list[Request] = []
        # Called with each request before it is forwarded (a test kills the server there).
        self.on_request: Callable[[Request], None] | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                parts = urlsplit(self.path)
                segments = parts.path.lstrip("/").split("/", 1)
                req = Request(
                    self.command,
                    segments[0],
                    segments[1] if len(segments) > 1 else "",
                    parse_qs(parts.query, keep_blank_values=True),
                )
                with proxy._lock:
                    proxy.requests.append(req)
                if proxy.on_request is not None:
                    proxy.on_request(req)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except OSError:
                    self.send_error(502, "upstream unreachable")
                    return
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                # A HEAD answer's Content-Length is the object's, with no body.
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def ops(self, bucket: str | None = None) -> list[str]:
        with self._lock:
            return [r.op for r in self.requests if bucket is None or r.bucket == bucket]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
