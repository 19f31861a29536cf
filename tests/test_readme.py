"""The README stays short and true: at most 200 lines, the two set-up commands first, and every
repo path it or ``docs/*.md`` names exists (no TVM import, runs in milliseconds)."""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_README_LINES = 200

#: Top-level names that are not the repo's content: caches, the venv, what ``make serve`` and
#: ``tune -o out`` write at run time (``./data``, ``out/``).
RUNTIME = {".git", ".venv", ".pytest_cache", ".ruff_cache", ".mypy_cache", "__pycache__"}
RUNTIME |= {"data", "out", "build"}
#: Endings that make a token without a ``/`` a file name (``setup.py``, ``pyproject.toml``).
EXTENSIONS = (".py", ".md", ".toml", ".yml", ".yaml")
#: Fenced blocks whose words are read as paths; shell and Python blocks are commands and code.
PROSE_FENCES = {"", "text"}

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
#: ``file.py:symbol`` and ``file.md#anchor`` name the file.
SUFFIX = re.compile(r"^(.+?\.(?:py|md|toml|yml|yaml))[:#].*$")


def top_level(repo: Path = REPO) -> set[str]:
    """The names a repo path may start with: what is at the top of the checkout."""
    return {
        p.name for p in repo.iterdir() if p.name not in RUNTIME and not p.name.endswith(".egg-info")
    }


def _path_token(word: str, top: set[str]) -> str | None:
    """``word`` as a repo path, or None when it is not one (a URL, ``~/…``, ``/tmp``, ``./data``,
    an option, a module name, a file of the user's such as ``model.onnx``)."""
    word = word.strip("'\"()[]{},;:.!?*")
    word = SUFFIX.sub(r"\1", word)
    if not word or "://" in word or word.startswith(("~", "/", ".", "…", "-", "$", "<")):
        return None
    if "/" not in word and not word.endswith(EXTENSIONS):
        return None
    if word.split("/", 1)[0] not in top:
        return None
    return word


def repo_paths(markdown: str, top: set[str]) -> set[str]:
    """Repo paths a Markdown text names in inline code and in prose code blocks (diagrams).

    Link targets are not here (they are relative to the file: see :func:`link_targets`)."""
    words: list[str] = []

    def drop_fence(match: re.Match[str]) -> str:
        if match.group(1) in PROSE_FENCES:
            words.extend(match.group(2).split())
        return ""

    prose = FENCE.sub(drop_fence, markdown)
    for span in INLINE_CODE.findall(prose):
        words.extend(span.split())
    return {path for word in words if (path := _path_token(word, top)) is not None}


def link_targets(markdown: str) -> Iterator[tuple[str, str]]:
    """(path, anchor) of every relative Markdown link or image; URLs and mail are skipped."""
    prose = FENCE.sub("", markdown)
    for target in LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        yield path, anchor


def exists(path: str, root: Path = REPO) -> bool:
    """``path`` exists under ``root``; a glob (``bench/reports/*-coverage.md``) or a brace list
    (``…-{warm,cold}-25.md``) must match something for each of its alternatives."""
    alternatives = [path]
    brace = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if brace:
        alternatives = [
            path[: brace.start()] + part + path[brace.end() :] for part in brace.group(1).split(",")
        ]
    return all(
        bool(glob.glob(str(root / alt))) if any(c in alt for c in "*?[") else (root / alt).exists()
        for alt in alternatives
    )


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, inline code and links unwrapped, punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", markdown))}


def missing_paths(doc: Path, top: set[str]) -> list[str]:
    """What ``doc`` names that does not exist: repo paths, link targets, link anchors."""
    text = doc.read_text()
    missing = sorted(p for p in repo_paths(text, top) if not exists(p))
    for path, anchor in link_targets(text):
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            missing.append(f"link {path}")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            missing.append(f"link {path}#{anchor}")
    return missing


def first_code_block(markdown: str) -> list[str]:
    match = FENCE.search(markdown)
    assert match is not None, "the README has no code block"
    return match.group(2).splitlines()


# --- the README and docs/ ----------------------------------------------------------------------


def test_readme_is_at_most_200_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_opens_with_the_two_setup_commands() -> None:
    text = README.read_text()
    block = first_code_block(text)
    assert block[0].split("#")[0].strip() == "make serve"
    assert block[1].split("#")[0].strip() == "make test"
    assert text.index("```") < text.index("\n## "), "the set-up commands come before any section"


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_named_exists(doc: Path) -> None:
    assert missing_paths(doc, top_level()) == []


def test_docs_by_audience_are_linked_from_the_readme() -> None:
    linked = {path for path, _ in link_targets(README.read_text())}
    for name in ("cli", "service", "architecture", "spaces", "performance"):
        assert f"docs/{name}.md" in linked


# --- the extractor on made-up text: it finds what is missing and nothing else ----------------

TOP = {"tuner", "schedules", "docs", "bench", "setup.py", "README.md"}

MADE_UP = """
Run `convtune tune model.onnx -o out` or `python -m bench.spaces --trials 16`; the search is in
`tuner/search/driver.py` (`tuner/search/driver.py:run_search`), its spaces in `schedules/space.py`.
See `https://tvm.apache.org/docs/a/b.py`, `~/models/x.py`, `/tmp/x/y.md`, `./data/convtune.db`,
`out/model.so`, `schedules.base.ScheduleSpace`, `setup.py` and `notes/old.md`.

```sh
.venv/bin/convtune bench/missing_in_shell.py
```

```text
tuner/graph/ingest.py ─► tuner/gone.py
```

[the CLI](docs/cli.md), [gone](docs/gone.md#x), [site](https://example.com/a/b.md).
"""


def test_extractor_reads_repo_paths_only() -> None:
    assert repo_paths(MADE_UP, TOP) == {
        "tuner/search/driver.py",
        "schedules/space.py",
        "setup.py",
        "tuner/graph/ingest.py",
        "tuner/gone.py",
    }
    assert list(link_targets(MADE_UP)) == [("docs/cli.md", ""), ("docs/gone.md", "x")]


def test_missing_paths_fails_on_a_stale_reference(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text(MADE_UP)
    found = missing_paths(doc, top_level())
    assert "schedules/space.py" in found  # the stale name this test was written after
    assert "tuner/gone.py" in found
    assert "link docs/gone.md" in found
    assert "tuner/search/driver.py" not in found and "setup.py" not in found


def test_exists_expands_globs_and_braces() -> None:
    assert exists("tuner/*.py")
    assert exists("tuner/{bench,pipeline}.py")
    assert not exists("tuner/{bench,nothing}.py")
    assert not exists("bench/reports/*-never-written.md")


def test_slug_is_githubs() -> None:
    assert slug("Extending convtune: adding a space, an option") == (
        "extending-convtune-adding-a-space-an-option"
    )
    assert slug("`convtune bench --isolated`: peers at their best") == (
        "convtune-bench---isolated-peers-at-their-best"
    )
    assert slug("Kernels: 1×1 convs, the stem") == "kernels-11-convs-the-stem"
