"""Errors of the Datasets app and how each reaches the caller: JSON under /api, an error page
inside the plugin's layout everywhere else — never a stack trace.

- a request that is wrong (bad parameter, bad dataset name, ``latest`` without a dataset): 4xx
  naming the parameter;
- a reference that matches nothing: 404;
- stored data that is damaged (a truncated or garbage segment, an index that points past a
  segment's rows): 500 with a message naming the version and the segment. A 5xx on purpose:
  the caller did nothing wrong, and server-error monitoring should see damaged storage.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response


class NotFound(LookupError):
    """A version reference that matches nothing (or, for a prefix, more than one version)."""


class BadRequest(ValueError):
    """A request the app cannot answer as asked (e.g. ``latest`` with no dataset)."""


class DamagedData(RuntimeError):
    """Stored data of a version cannot be read as its manifest says; the message names it."""


def _is_api(request: Request) -> bool:
    root = request.scope.get("root_path", "").rstrip("/")
    return request.url.path.startswith(root + "/api/")


def validation_message(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    """One line naming each bad parameter, and the errors as plain JSON (no echoed input)."""
    errors = []
    for e in exc.errors():
        loc = [str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body")]
        msg = str(e.get("msg", "invalid"))
        # pydantic prefixes a validator's ValueError; the message itself names the problem.
        msg = msg.removeprefix("Value error, ")
        errors.append({"parameter": ".".join(loc) or "request", "message": msg})
    line = "; ".join(f"{e['parameter']}: {e['message']}" for e in errors) or "invalid request"
    return line, errors


def install(app: FastAPI) -> None:
    from pipeline.ui import pages

    def reply(request: Request, status: int, title: str, message: str, **extra: Any) -> Response:
        if _is_api(request):
            return JSONResponse({"detail": message, **extra}, status_code=status)
        return pages.render(request, "error.html", status_code=status, title=title, message=message)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> Response:
        line, errors = validation_message(exc)
        return reply(request, 422, "Bad request", line, errors=errors)

    @app.exception_handler(BadRequest)
    def _bad(request: Request, exc: BadRequest) -> Response:
        return reply(request, 400, "Bad request", str(exc))

    @app.exception_handler(NotFound)
    def _not_found(request: Request, exc: NotFound) -> Response:
        return reply(request, 404, "Not found", str(exc))

    @app.exception_handler(DamagedData)
    def _damaged(request: Request, exc: DamagedData) -> Response:
        return reply(request, 500, "Damaged data", str(exc))
