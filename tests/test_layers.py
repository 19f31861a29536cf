"""The import contract: every package imports only downwards, and no module imports itself back.

Layers, top first; the groups of one row are independent of each other (neither imports the
other). A module belongs to the group of its longest matching prefix; every module must belong
to one, so a new package has to take its place here. Function-level (lazy) and TYPE_CHECKING
imports count like any other: a lazy import hides a cycle from Python at import time, not from
the reader.

Why these layers: the service drives the tuner; the tuner's pipeline drives the search, which
measures candidates and reads the graph's tasks; the graph lowers ONNX into tasks using the
schedules' op definitions; spaces schedule ops and lowering passes finish what they generate;
the CPU intrinsics loader only prepares TVM for the spaces, beside the ops;
db and the tuner's TVM-free base (errors, options, target, events, artifact files, tables) serve
everything above and depend on nothing of ours.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tuner", "schedules", "db", "service")

#: Top layer first; each row's groups are independent; a group is a tuple of module prefixes.
LAYERS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("service",),),
    (("service.app.core",),),
    (
        (
            "tuner.pipeline",
            "tuner.peer_check",
            "tuner.profile",
            "tuner.bench",
            "tuner.library",
            "tuner.algorithms",
        ),
    ),
    (("tuner.search",),),
    (("tuner.measure",),),
    (("tuner.graph",),),
    (("schedules.spaces", "schedules.untuned"),),
    (("schedules.lowering",),),
    (("schedules.ops",), ("schedules.cpu_intrinsics",)),
    (
        ("db",),
        (
            "tuner.errors",
            "tuner.options",
            "tuner.target",
            "tuner.cpu_flags",
            "tuner.events",
            "tuner.artifact_files",
            "tuner.code_version",
            "tuner.tables",
        ),
    ),
)
#: Packages that only mark a folder (an empty ``__init__.py``): matched exactly, never as a prefix.
MARKERS = ("tuner", "schedules")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module of our packages under ``root``, by dotted name without ``convtune.``."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """The modules of ours that ``name`` imports, anywhere in its body, with their line."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module:
                module = node.module
            else:
                continue
            # ``from package import module`` imports the module; ``from module import name`` it.
            targets = [
                f"{module}.{alias.name}"
                if f"{module}.{alias.name}".removeprefix("convtune.") in known
                else module
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            ours = target.removeprefix("convtune.")
            if target.startswith("convtune.") or node_is_relative(node):
                while ours and ours not in known:
                    ours = ours.rpartition(".")[0]
                if ours and ours != name:
                    yield ours, node.lineno


def node_is_relative(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and node.level > 0


def place(name: str) -> tuple[int, int] | None:
    """(row, group) of the longest prefix matching ``name``; None when no layer claims it."""
    if name in MARKERS:
        return len(LAYERS), 0
    best: tuple[int, int, int] | None = None
    for row, groups in enumerate(LAYERS):
        for group, prefixes in enumerate(groups):
            for prefix in prefixes:
                matches = name == prefix or name.startswith(prefix + ".")
                if matches and (best is None or len(prefix) > best[2]):
                    best = (row, group, len(prefix))
    return None if best is None else best[:2]


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    known = modules(root)
    return {name: dict(imports(name, path, known)) for name, path in known.items()}


def violations(root: Path) -> list[str]:
    """Upward or sideways imports and modules no layer claims, one line each."""
    found = []
    for name, targets in import_graph(root).items():
        own = place(name)
        if own is None:
            found.append(f"{name}: in no layer")
            continue
        for target, line in targets.items():
            theirs = place(target)
            if theirs is None or theirs == own:
                continue
            if theirs[0] < own[0]:
                found.append(f"{name}:{line} imports {target}, a layer above")
            elif theirs[0] == own[0]:
                found.append(f"{name}:{line} imports {target}, an independent group")
    return sorted(found)


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def copy_packages(dest: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("*.pyc"))
    return dest


def add_import(path: Path, line: str) -> None:
    """Append ``line`` inside a function, as a lazy import would hide it."""
    path.write_text(path.read_text() + f"\n\ndef _added() -> None:\n    {line}\n")


def test_every_import_points_down() -> None:
    assert violations(ROOT) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph(ROOT)) == []


def test_an_upward_import_is_caught_even_when_lazy(tmp_path: Path) -> None:
    root = copy_packages(tmp_path)
    add_import(root / "tuner/graph/fold.py", "from convtune.service.cli import app")
    found = violations(root)
    assert len(found) == 1 and found[0].startswith("tuner.graph.fold:")
    assert found[0].endswith("imports service.cli, a layer above")


def test_a_sideways_import_between_independent_groups_is_caught(tmp_path: Path) -> None:
    root = copy_packages(tmp_path)
    add_import(root / "db/stats.py", "from convtune.tuner import errors")
    assert [v.split(":")[0] for v in violations(root)] == ["db.stats"]
    assert "an independent group" in violations(root)[0]


def test_a_cycle_within_one_layer_is_caught(tmp_path: Path) -> None:
    root = copy_packages(tmp_path)
    # measure.verify imports measure.runtime; the reverse closes a loop inside tuner.measure.
    add_import(root / "tuner/measure/runtime.py", "from . import verify")
    assert violations(root) == []
    assert ["tuner.measure.runtime", "tuner.measure.verify"] in cycles(import_graph(root))


def test_a_module_outside_every_layer_is_caught(tmp_path: Path) -> None:
    root = copy_packages(tmp_path)
    (root / "schedules/stray.py").write_text('"""No layer claims it."""\n')
    assert "schedules.stray: in no layer" in violations(root)


def test_every_layer_prefix_names_a_module() -> None:
    """A stale row (a package renamed away) would let its modules fall to a shorter prefix."""
    known = modules(ROOT)
    prefixes: Sequence[str] = [p for row in LAYERS for group in row for p in group]
    assert [p for p in prefixes if not any(m == p or m.startswith(p + ".") for m in known)] == []
