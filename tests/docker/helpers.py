"""Reading docker-compose.yml and the Dockerfiles the way Docker does, without a Docker engine.

Compose: PyYAML (merge keys `<<:` included) plus compose's variable interpolation
(`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`, `$$`).
Dockerfiles: instructions with line continuations, split into build stages, ARG defaults
substituted. The tests compare these readings with `docker-compose config` where it is
installed, so a mistake here cannot hide a mistake in the files.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKER_DIR = REPO / "docker"

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    """A required variable (`${VAR:?message}`) is missing; the message is compose's."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("named")
        op, arg = m.group("op"), m.group("arg") or ""
        value = env.get(name)
        unset_or_empty = value is None or value == ""
        if op in (":-", "-"):
            missing = unset_or_empty if op == ":-" else value is None
            return interpolate(arg, env) if missing else value
        if op in (":?", "?"):
            missing = unset_or_empty if op == ":?" else value is None
            if missing:
                raise InterpolationError(f"{name}: {arg}")
            return value
        return value or ""

    return _VAR.sub(sub, text)


def referenced_variables(text: str) -> set[str]:
    """Every variable the compose text interpolates (not `$$NAME`, which reaches the shell)."""
    return {
        m.group("braced") or m.group("named") for m in _VAR.finditer(text) if not m.group("escaped")
    }


def _resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_resolve(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _resolve(v, env) for k, v in node.items()}
    return node


def load_compose(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file with anchors merged and, if `env` is given, variables interpolated."""
    data = yaml.safe_load(path.read_text())
    data = {k: v for k, v in data.items() if not k.startswith("x-")}
    return _resolve(data, env) if env is not None else data


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


@dataclass(frozen=True)
class VolumeSpec:
    source: str
    target: str
    read_only: bool


def service_volumes(service: Mapping[str, Any]) -> list[VolumeSpec]:
    out = []
    for item in service.get("volumes") or []:
        if isinstance(item, dict):
            out.append(
                VolumeSpec(
                    str(item.get("source", "")), str(item["target"]), bool(item.get("read_only"))
                )
            )
            continue
        parts = str(item).split(":")
        mode = parts[2] if len(parts) > 2 else "rw"
        out.append(
            VolumeSpec(parts[0], parts[1] if len(parts) > 1 else parts[0], "ro" in mode.split(","))
        )
    return out


def mount_at(service: Mapping[str, Any], target: str) -> VolumeSpec | None:
    for v in service_volumes(service):
        if v.target.rstrip("/") == target.rstrip("/"):
            return v
    return None


# --------------------------------------------------------------------------- Dockerfiles


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int

    def json_args(self) -> list[str] | None:
        """The exec (JSON) form's list, or None for the shell form."""
        try:
            value = json.loads(self.args)
        except ValueError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str  # the FROM image, ARGs substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def text(self, keyword: str | None = None) -> str:
        return "\n".join(
            i.args for i in self.instructions if keyword is None or i.keyword == keyword
        )


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def arg_default(self, name: str) -> str | None:
        """An ARG's default wherever it is declared (global first, then the stages)."""
        if name in self.global_args:
            return self.global_args[name]
        for stage in self.stages:
            for ins in stage.of("ARG"):
                key, _, value = ins.args.partition("=")
                if key.strip() == name and _:
                    return value.strip().strip('"')
        return None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines, buf, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comments inside a continued instruction are dropped by Docker too
        if not buf:
            start = n
        if raw.rstrip().endswith("\\"):
            buf += raw.rstrip()[:-1] + " "
            continue
        buf += raw
        lines.append((start, buf.strip()))
        buf = ""
    if buf:
        lines.append((start, buf.strip()))
    return lines


def parse_dockerfile(path: Path) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line_no, line in _logical_lines(path.read_text()):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            words = args.split()
            image = interpolate(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=image, name=name))
        elif not stages:
            if keyword == "ARG":
                key, _, value = args.partition("=")
                global_args[key.strip()] = value.strip().strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, args, line_no))
    return Dockerfile(path=path, global_args=global_args, stages=stages)


def copy_sources(ins: Instruction) -> list[str]:
    """Source paths of a COPY/ADD (flags and the destination left out)."""
    words = ins.json_args() or shlex.split(ins.args)
    words = [w for w in words if not w.startswith("--")]
    return words[:-1]


# --------------------------------------------------------------------------- .dockerignore


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str, dockerignore: Path) -> bool:
    """Whether Docker leaves `path` (relative to the context) out of the build context:
    patterns in order, the last match wins, `!` re-includes; a pattern that matches a parent
    folder matches everything under it."""
    patterns = [
        p.strip()
        for p in dockerignore.read_text().splitlines()
        if p.strip() and not p.strip().startswith("#")
    ]
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pat in patterns:
        negate = pat.startswith("!")
        rx = _glob_regex(pat.lstrip("!").strip("/"))
        if any(rx.match(c) for c in candidates):
            excluded = not negate
    return excluded
