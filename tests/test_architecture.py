"""The import-linter layers contract (``[tool.importlinter]`` in pyproject.toml) holds on the
tree, and breaks on an upward import (TYPE_CHECKING ones included), a cycle between layers, or
a costctl module the contract does not place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from helpers import SHIELD, REPO

LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())", "--config", "pyproject.toml", "--no-cache"]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["PYTHONPATH"] = str(root)
    return subprocess.run(LINT, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_contract_counts_type_checking_imports_and_places_every_module() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert cfg["exclude_type_checking_imports"] is False
    layers, adapters = cfg["contracts"]
    assert layers["type"] == "layers" and layers["exhaustive"] is True and layers["containers"] == ["costctl"]
    # the adapters may use only the bottom layers: every other layer's modules are forbidden
    assert adapters["type"] == "forbidden" and adapters["source_modules"] == ["costctl_providers"]
    bottom = {"costctl.errors", "costctl.money", "costctl.clock", "costctl.validation", "costctl.records",
              "costctl.paths", "costctl.job", "costctl.checkpoint_integrity", "costctl.config_types",
                  "costctl.i18n", "costctl.numbers", "costctl.jsonio", "costctl.user_regex",
              "costctl.tomlfile"}
    placed = {f"costctl.{name.strip(' ()')}" for layer in layers["layers"]
              for name in layer.replace(":", "|").split("|")}
    assert set(adapters["forbidden_modules"]) == placed - bottom


def test_the_contract_holds_on_the_tree(tmp_path: Path) -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_upward_import_or_an_unplaced_module_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "costctl", tmp_path / "costctl", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copytree(REPO / "providers", tmp_path / "costctl_providers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    # An adapter reaching into the ledger.
    vast = tmp_path / "costctl_providers" / "vastai" / "provider.py"
    vast.write_text(vast.read_text() + "\nfrom costctl.ledger import Ledger  # noqa\n")
    # The lifecycle importing the watch, if only for a type: the old cycle.
    controller = tmp_path / "costctl" / "lifecycle" / "controller.py"
    controller.write_text(controller.read_text() + "\nfrom typing import TYPE_CHECKING\n"
                          "if TYPE_CHECKING:\n    from ..watch import Watcher\n")
    # A new subpackage no layer names.
    (tmp_path / "costctl" / "newthing").mkdir()
    (tmp_path / "costctl" / "newthing" / "__init__.py").write_text("")
    result = _lint(tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "costctl.lifecycle is not allowed to import costctl.watch" in out
    assert "costctl.newthing" in out
    assert "costctl_providers.vastai.provider -> costctl.ledger" in out
