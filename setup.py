"""Package layout for setuptools (metadata lives in pyproject.toml).

The repository keeps the product card's top-level folders, but two of them are installed
under namespaced import names so that they never collide with other distributions:

* ``providers/`` -> ``costctl_providers`` (a generic ``providers`` package is too common);
* ``alembic/``   -> ``costctl_alembic`` (a top-level ``alembic`` package would shadow the
  Alembic library itself). ``alembic/`` deliberately has no ``__init__.py``.

``costctl.progress._scan`` is an optional C extension (the native log scanner, see
``costctl/progress/lines.py``): ``optional=True`` lets a machine without a compiler install the
package anyway, and costctl then uses its pure-Python parser, with the same results.
"""

from setuptools import Extension, find_packages, setup

packages = find_packages(include=["costctl", "costctl.*"])
packages += ["costctl_providers"] + [
    "costctl_providers." + name for name in find_packages("providers")
]
packages += ["costctl_alembic", "costctl_alembic.versions"]

setup(
    packages=packages,
    ext_modules=[
        Extension(
            "costctl.progress._scan",
            sources=["costctl/progress/_scan.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        )
    ],
    package_dir={
        "costctl": "costctl",
        "costctl_providers": "providers",
        "costctl_alembic": "alembic",
    },
    package_data={"costctl": ["py.typed", "data/*", "serve/templates/*.html", "catalog/data/*", "locale/*/LC_MESSAGES/*.mo", "locale/*/LC_MESSAGES/*.po"], "costctl_alembic": ["script.py.mako"]},
)
