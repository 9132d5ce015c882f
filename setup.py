"""Package layout for setuptools (metadata lives in pyproject.toml).

The repository keeps the product card's top-level folders, but two of them are installed
under namespaced import names so that they never collide with other distributions:

* ``providers/`` -> ``costctl_providers`` (a generic ``providers`` package is too common);
* ``alembic/``   -> ``costctl_alembic`` (a top-level ``alembic`` package would shadow the
  Alembic library itself). ``alembic/`` deliberately has no ``__init__.py``.
"""

from setuptools import find_packages, setup

packages = find_packages(include=["costctl", "costctl.*"])
packages += ["costctl_providers"] + [
    "costctl_providers." + name for name in find_packages("providers")
]
packages += ["costctl_alembic", "costctl_alembic.versions"]

setup(
    packages=packages,
    package_dir={
        "costctl": "costctl",
        "costctl_providers": "providers",
        "costctl_alembic": "alembic",
    },
    package_data={"costctl": ["py.typed", "data/*", "catalog/data/*"], "costctl_alembic": ["script.py.mako"]},
)
