"""What is never translated (docs/i18n.md): output for programs. ``--format json`` is the same
in Chinese and in English, byte for byte, while the table for people changes language."""

from __future__ import annotations

import json
import os

import pytest

from costctl import i18n
from costctl.cli.main import main


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    before = i18n.language()
    yield
    i18n.set_language(before)


def _gpus(monkeypatch, capsys, language: str, *args: str) -> str:
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", language)
    assert main(["gpus", "--provider", "autodl", "--offline", *args]) == 0
    return capsys.readouterr().out


def test_json_is_the_same_in_both_languages(monkeypatch, capsys):
    english = _gpus(monkeypatch, capsys, "en", "--format", "json")
    chinese = _gpus(monkeypatch, capsys, "zh_CN", "--format", "json")
    assert english == chinese and len(json.loads(english)) >= 12
    # the table people read is not
    assert _gpus(monkeypatch, capsys, "en") != _gpus(monkeypatch, capsys, "zh_CN")
