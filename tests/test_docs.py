"""The docs cannot rot silently: every relative link in README.md and docs/*.md resolves (and
its #anchor names a heading), every `make <target>` is a Makefile target, every
`laketrain <command>` is a command of the CLI, every `python -m <module>` and every repository
path or `pipeline.`/`training.` name written in code is there, and no absolute path of a
development machine appears.

Commands, paths and names are read from code only (inline code spans and fenced blocks, but
not ```text blocks, which hold pictures): prose may say "make sure" or "laketrain turns a lake
into models" freely.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
MAKE = re.compile(r"(?:^|[\s;&|(])make((?:[ \t]+[^\s;&|)`]+)+)")
LAKETRAIN = re.compile(r"(?:^|[\s;&|(=$])laketrain((?:[ \t]+[^\s;&|)`]+)+)")
PYTHON_M = re.compile(r"(?:python3?|\$\(PY\))[ \t]+-m[ \t]+([A-Za-z_][\w.]*)")
TOP_DIRS = ("pipeline", "training", "dags", "tests", "bench", "docker", "docs", "examples")
REPO_PATH = re.compile(r"^(?:" + "|".join(TOP_DIRS) + r")/[\w./-]*$")
PY_NAME = re.compile(r"^((?:pipeline|training)(?:\.\w+)+)(?:\(.*\))?$")
# Build outputs and test artifacts that exist only after a run; docs may name them.
GENERATED = ("tests/artifacts", "bench/_work")
ABSOLUTE = re.compile(r"(?<![\w.])/(?:work|tmp|root)/")


def _text(doc: Path) -> str:
    return doc.read_text(encoding="utf-8")


def _without_code(text: str) -> str:
    """The prose: fenced blocks and inline code removed (links inside code are not links)."""
    text = FENCE.sub("", text)
    return INLINE.sub("", text)


def _code(text: str) -> list[str]:
    """Every fenced block's lines and every inline code span, in order."""
    chunks = []
    for m in FENCE.finditer(text):
        if m.group(0).split("\n", 1)[0].strip("`~ ") == "text":
            continue  # a picture or prose in a box, not commands
        chunks.extend(m.group(2).splitlines())
    for m in INLINE.finditer(FENCE.sub("", text)):
        chunks.append(m.group(2))
    return chunks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", _text(doc))):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(doc: Path) -> list[str]:
    links = []
    for m in LINK.finditer(_without_code(_text(doc))):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # http:, https:, mailto:, ...: not a file of the repository
        links.append(target)
    return links


def broken_links(doc: Path) -> list[str]:
    problems = []
    for target in relative_links(doc):
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            problems.append(f"{target}: no such heading in {dest.name}")
    return problems


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+)[ \t]*:(?!=)", text, re.M))
    for phony in re.findall(r"^\.PHONY:(.*)$", text, re.M):
        targets.update(phony.split())
    return targets


def make_targets_named(text: str) -> list[str]:
    named = []
    for chunk in _code(text):
        for m in MAKE.finditer(chunk):
            words = [w for w in m.group(1).split() if "=" not in w and not w.startswith("-")]
            # Only a word shaped like a target: "<password from make run>" names none.
            if words and re.fullmatch(r"[A-Za-z0-9][\w.-]*", words[0]):
                named.append(words[0])
    return named


def cli_tree() -> dict[str, set[str]]:
    """{command: its subcommands (empty for a plain command)} of the `laketrain` typer app."""
    import typer

    from pipeline.cli_app import app

    # Duck-typed: typer may bring a click of its own, so isinstance(click.Group) can fail.
    group = typer.main.get_command(app)
    return {name: set(getattr(cmd, "commands", None) or ()) for name, cmd in group.commands.items()}


def cli_commands_named(text: str) -> list[tuple[str, str | None]]:
    """(command, subcommand or None) of every `laketrain <command> ...` in code."""
    named = []
    for chunk in _code(text):
        for m in LAKETRAIN.finditer(chunk):
            words = m.group(1).split()
            if not words or words[0].startswith("-"):
                continue  # `laketrain --help`
            sub = words[1] if len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]) else None
            named.append((words[0], sub))
    return named


def missing_python_names(text: str) -> list[str]:
    """`pipeline.x.y` / `training.x` names in code whose module is not there, or whose first
    attribute is not in the module's source; and repository paths that do not exist."""
    problems = []
    for chunk in _code(text):
        chunk = chunk.strip()
        if REPO_PATH.match(chunk) and not chunk.startswith(GENERATED):
            if not (REPO / chunk).exists():
                problems.append(f"{chunk}: no such path")
            continue
        m = PY_NAME.match(chunk)
        if not m:
            continue
        parts = m.group(1).split(".")
        path, used = REPO, 0
        source = ""
        for part in parts:
            if (path / part).is_dir() and (path / part / "__init__.py").exists():
                path, used = path / part, used + 1
                source = (path / "__init__.py").read_text()
            elif (path / f"{part}.py").exists():
                path, used = path / f"{part}.py", used + 1
                source = path.read_text()
                break
            else:
                break
        if used < 2 and len(parts) > 1 and not (REPO / parts[0] / f"{parts[1]}.py").exists():
            if not re.search(rf"\b{re.escape(parts[1])}\b", source):
                problems.append(f"{chunk}: {parts[0]} has no {parts[1]}")
            continue
        rest = parts[used:]
        if rest and not re.search(rf"\b{re.escape(rest[0])}\b", source):
            problems.append(f"{chunk}: {'.'.join(parts[:used])} has no {rest[0]}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_make_targets_exist(doc: Path) -> None:
    targets = makefile_targets()
    unknown = sorted({t for t in make_targets_named(_text(doc)) if t not in targets})
    assert unknown == [], f"not Makefile targets: {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_cli_commands_exist(doc: Path) -> None:
    tree = cli_tree()
    unknown = []
    for command, sub in cli_commands_named(_text(doc)):
        if command not in tree:
            unknown.append(command)
        elif tree[command] and sub is not None and sub not in tree[command]:
            unknown.append(f"{command} {sub}")
    assert sorted(set(unknown)) == [], f"not laketrain commands: {sorted(set(unknown))}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_python_modules_and_paths_exist(doc: Path) -> None:
    text = _text(doc)
    modules = sorted({m for chunk in _code(text) for m in PYTHON_M.findall(chunk)})
    assert [m for m in modules if importlib.util.find_spec(m) is None] == []
    assert missing_python_names(text) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_absolute_machine_paths(doc: Path) -> None:
    hits = [line for line in _text(doc).splitlines() if ABSOLUTE.search(line)]
    assert hits == []


def test_the_checks_catch_rot(tmp_path: Path) -> None:
    """Each check fails on a doc with the fault it looks for (a check that cannot fail is no
    check): a missing file, a missing heading, an unknown target, command, module and path."""
    (tmp_path / "there.md").write_text("# A heading\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md#a-heading) [gone](missing.md) [bad](there.md#nope) "
        "[web](https://example.org/x) `[in code](nowhere.md)`\n\n"
        "Run `make run`, then `make no-such-target`; `laketrain versions`, `laketrain frobnicate`,"
        " `laketrain db upgrade`, `laketrain db nope`.\n\n"
        "```sh\npython -m pipeline.orchestration.nosuch\nmake lint\n```\n\n"
        "`pipeline/nosuch.py` `pipeline/settings.py` `pipeline.settings.load_settings`"
        " `pipeline.settings.no_such_name` and /tmp/x\n"
    )
    text = doc.read_text()
    assert broken_links(doc) == [
        "missing.md: no such file",
        "there.md#nope: no such heading in there.md",
    ]
    targets = makefile_targets()
    assert [t for t in make_targets_named(text) if t not in targets] == ["no-such-target"]
    tree = cli_tree()
    named = cli_commands_named(text)
    assert [c for c, _ in named if c not in tree] == ["frobnicate"]
    assert [(c, s) for c, s in named if c in tree and tree[c] and s not in tree[c]] == [
        ("db", "nope")
    ]
    modules = [m for chunk in _code(text) for m in PYTHON_M.findall(chunk)]
    assert [m for m in modules if importlib.util.find_spec(m) is None] == [
        "pipeline.orchestration.nosuch"
    ]
    assert missing_python_names(text) == [
        "pipeline/nosuch.py: no such path",
        "pipeline.settings.no_such_name: pipeline.settings has no no_such_name",
    ]
    assert ABSOLUTE.search(text)


def test_slug_follows_github() -> None:
    assert slug("On-disk format of a version") == "on-disk-format-of-a-version"
    assert slug("The head and `latest`") == "the-head-and-latest"
    assert slug("DAG `train`: the form") == "dag-train-the-form"
