"""Start-up cost and packaging: the CLI's help loads no TVM, and a non-editable install works."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONVTUNE = str(Path(sys.executable).with_name("convtune"))


# What makes `convtune --help` slow is what it imports (TVM alone took ~0.5 s, onnx and
# onnxruntime more); the import set is asserted, not a wall-clock time, which a loaded machine
# would make flaky. Measured on a quiet machine: 0.80 s before TVM left the import path, 0.15 s
# after (`time convtune --help`, warm).
HEAVY = ("tvm", "onnx", "onnxruntime", "numpy", "sqlalchemy", "fastapi", "xgboost")


def test_cli_help_imports_nothing_heavy() -> None:
    probe = f"import sys, convtune.service.cli; print(sorted(set({HEAVY!r}) & set(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
    out = subprocess.run([CONVTUNE, "--help"], capture_output=True, text=True, check=True)
    assert "tune" in out.stdout and "workloads" in out.stdout


def test_worker_and_errors_import_no_tvm() -> None:
    probe = (
        "import sys, convtune.service.worker, convtune.tuner.errors, convtune.tuner.options;"
        "print('tvm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_non_editable_install_has_every_module_and_data_file(tmp_path: Path) -> None:
    """``pip install .`` (as the Docker image does) into a fresh venv; the dependencies come from
    this environment through a .pth file, convtune itself only from the fresh install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    fresh_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(fresh_site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(REPO)],
        check=True, cwd=tmp_path,
    )  # fmt: skip
    expected = sorted(
        "convtune."
        + ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for root in ("tuner", "schedules", "db", "service")
        for path in (REPO / root).rglob("*.py")
        # alembic runs env.py itself; it cannot be imported outside a migration.
        if path.name != "env.py"
    )
    probe = f"""
import importlib, pathlib, sys
site = pathlib.Path({fresh_site!r})
for name in {expected!r}:
    module = importlib.import_module(name)
    assert pathlib.Path(module.__file__).is_relative_to(site), (name, module.__file__)
import convtune.db, convtune.service.dashboard
db = pathlib.Path(convtune.db.__file__).parent
dash = pathlib.Path(convtune.service.dashboard.__file__).parent
for required in (db / "alembic.ini", db / "migrations" / "script.py.mako",
                 db / "migrations" / "env.py",
                 dash / "templates" / "base.html", dash / "static" / "dashboard.js"):
    assert required.is_file(), required
print(len({expected!r}))
"""
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == len(expected) > 40
