"""The README keeps exactly two copy-paste commands, and CI runs the test one verbatim."""

from __future__ import annotations

import re

from helpers import REPO


def _commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)


def test_readme_has_exactly_two_copy_paste_commands():
    cmds = _commands()
    assert len(cmds) == 2, cmds
    main, tests = cmds
    assert "costctl watch" in main and "examples/train_digits.py" in main
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command_verbatim():
    _, tests = _commands()
    ci = (REPO / ".ci" / "run").read_text()
    assert tests.strip() in ci.splitlines()
