"""The code identity every cached result is keyed on changes with the source that computes."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from convtune.tuner.code_version import DIGEST_CHARS, code_version, source_digest


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FILES = {
    "tuner/a.py": "A = 1\n",
    "schedules/spaces/b.py": "B = 2\n",
    "service/c.py": "C = 3\n",
}


def test_equal_trees_anywhere_give_equal_digests(tmp_path: Path) -> None:
    one = _tree(tmp_path / "one", FILES)
    two = _tree(tmp_path / "two", FILES)
    assert source_digest(one) == source_digest(two)


def test_an_edited_schedule_changes_the_digest(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    before = source_digest(root)
    (root / "schedules/spaces/b.py").write_text("B = 3\n")
    assert source_digest(root) != before


def test_a_renamed_module_changes_the_digest(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    before = source_digest(root)
    (root / "tuner/a.py").rename(root / "tuner/a2.py")
    assert source_digest(root) != before


def test_the_service_and_bytecode_leave_the_digest_alone(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    before = source_digest(root)
    (root / "service/c.py").write_text("C = 4\n")
    (root / "tuner/a.cpython-311.pyc").write_bytes(b"\0\1")
    assert source_digest(root) == before


def test_the_installed_code_version_names_the_release_and_this_source() -> None:
    root = Path(__file__).resolve().parents[2]
    release, digest = code_version().split("+")
    assert release == version("convtune")
    assert digest == source_digest(root)[:DIGEST_CHARS]
