"""Package discovery for the project's layout: the top-level folders ``tuner``, ``schedules``,
``db`` and ``service`` are installed as ``convtune.<folder>``. Every sub-folder with an
``__init__.py`` is found here, so a new subpackage is never left out of a non-editable install.
"""

from pathlib import Path

from setuptools import setup

ROOTS = ("tuner", "schedules", "db", "service")

setup(
    packages=[
        "convtune." + ".".join(init.parent.parts)
        for root in ROOTS
        for init in sorted(Path(root).rglob("__init__.py"))
    ],
    package_dir={f"convtune.{root}": root for root in ROOTS},
)
