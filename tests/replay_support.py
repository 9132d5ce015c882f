"""Shared helpers for the replay / analyze / corpus tests.

The real logs live in ``$COSTCTL_CORPUS`` (default ``../shared/corpus`` beside the checkout). A missing corpus
skips the test with the reason, or fails when ``CI=true`` (the corpus facts must be checked there).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import CORPUS  # noqa: E402 - ../shared/corpus beside the checkout


def corpus_file(name: str) -> Path:
    """Path of corpus file ``name``; skip (or fail under CI) when it is not there."""
    path = CORPUS / name
    if not path.is_file():
        where = "is not there" if CORPUS.is_dir() else "not found: the directory does not exist"
        reason = (f"corpus file {path} {where} (the real logs live in ../shared/corpus beside the checkout; "
                  "set COSTCTL_CORPUS=DIR to point elsewhere)")
        if os.environ.get("CI") == "true":
            pytest.fail(reason + " (CI=true: the corpus checks must run)", pytrace=False)
        pytest.skip(reason)
    return path


def renamed_copy(path: Path, tmp_path: Path, name: str = "renamed.dat") -> Path:
    """A byte-identical copy of ``path`` under a name that says nothing about its format."""
    target = tmp_path / name
    shutil.copyfile(path, target)
    return target
