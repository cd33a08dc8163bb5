"""A tiny Airflow REST API v2 client (urllib: nothing to install, nothing to mock), and the
wait until every component reports healthy."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from pipeline.orchestration.devstack.processes import Proc

# How long one request may take. A trigger is one short write to Airflow's database, but on a
# machine whose disk is saturated (a clean-clone CI run on 12-07: I/O pressure ~80 %) the API
# server took over 30 s to answer one; a request that hangs still fails, two minutes on.
_TIMEOUT_S = 120
# The health poll stays short: wait_healthy polls it again, within its own deadline.
_HEALTH_TIMEOUT_S = 10


class Api:
    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base = base_url.rstrip("/")
        self.username, self.password = username, password
        self.token: str | None = None

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        auth: bool = True,
        timeout: float = _TIMEOUT_S,
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if auth:
            if self.token is None:
                self.login()
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def login(self) -> None:
        status, body = self._request(
            "POST",
            "/auth/token",
            {"username": self.username, "password": self.password},
            auth=False,
        )
        if status not in (200, 201) or not isinstance(body, dict):
            raise RuntimeError(f"login to {self.base} failed: HTTP {status}")
        self.token = body["access_token"]

    def get(self, path: str) -> tuple[int, Any]:
        return self._request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("POST", path, body)

    def patch(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("PATCH", path, body)

    def health(self) -> dict | None:
        try:
            status, body = self._request(
                "GET", "/api/v2/monitor/health", auth=False, timeout=_HEALTH_TIMEOUT_S
            )
        except (OSError, urllib.error.URLError):
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def dag_runs(self, dag_id: str, limit: int = 20) -> list[dict]:
        status, body = self.get(f"/api/v2/dags/{dag_id}/dagRuns?limit={limit}&order_by=-run_after")
        return body.get("dag_runs", []) if status == 200 and isinstance(body, dict) else []

    def trigger(self, dag_id: str, conf: dict) -> tuple[int, Any]:
        return self.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})


def wait_healthy(api: Api, timeout: float = 180.0, procs: list[Proc] | None = None) -> dict:
    """Until every component reports healthy; raise when one exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    last: dict | None = None
    while time.monotonic() < deadline:
        for p in procs or []:
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.name} exited with code {p.popen.returncode}")
        last = api.health()
        if last and all(
            (last.get(k) or {}).get("status") == "healthy"
            for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        ):
            return last
        # A health call is a few milliseconds: looking 4 times a second has the stack in use
        # up to a second sooner (make run, and every end-to-end test's start).
        time.sleep(0.25)
    raise TimeoutError(f"the stack was not healthy after {timeout:.0f}s: {last}")
