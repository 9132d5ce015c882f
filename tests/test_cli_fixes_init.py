"""Trial fixes for `costctl init`: a directory is refused up front, and the example config
shows the [catalog] section and a real provider table."""

from __future__ import annotations

import os
import re
import tomllib
from datetime import date
from decimal import Decimal
from importlib import resources

import pytest

from costctl.cli.main import main
from costctl.config import Settings, load_settings
from costctl_providers.autodl.config import AutoDLConfig


@pytest.fixture(autouse=True)
def _no_env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def example() -> str:
    return resources.files("costctl").joinpath("data/costctl.example.toml").read_text(encoding="utf-8")


def uncomment(block: str) -> str:
    """Uncomment lines that hold a key or a table header ("# key = ...", "# [table]")."""
    return "\n".join(re.sub(r"^# (?=[\[a-z_])", "", line) for line in block.splitlines())


@pytest.mark.parametrize("force", [False, True])
def test_init_into_a_directory_is_one_clear_line(tmp_path, capsys, force):
    target = tmp_path / "somewhere"
    target.mkdir()
    code = main(["init", str(target), *(["--force"] if force else [])])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"costctl: {target} is a directory; give a file path, e.g. {target / 'costctl.toml'}\n"
    assert list(target.iterdir()) == []


def test_example_has_the_catalog_section_commented_and_still_equals_defaults(tmp_path):
    text = example()
    assert "[catalog]" in text and "# [[catalog.exchange_rates]]" in text and "# [[catalog.prices]]" in text
    assert "# currency = " in text
    path = tmp_path / "costctl.toml"
    path.write_text(text)
    assert load_settings(path).catalog == Settings().catalog

    block = text[text.index("[catalog]"):text.index("# One table per provider")]
    path.write_text(uncomment(block))
    catalog = load_settings(path).catalog
    (rate,) = catalog.exchange_rates
    assert (rate.base, rate.quote, rate.rate, rate.as_of) == ("USD", "CNY", Decimal("7.10"), date(2026, 7, 1))
    (price,) = catalog.prices
    assert (price.provider, price.gpu, price.currency) == ("autodl", "RTX 4090", "CNY")
    assert catalog.currency == "CNY"


def test_example_provider_table_shows_real_keys():
    text = example()
    assert "see README" not in text
    block = text[text.index("# [providers.autodl]"):]
    table = tomllib.loads(uncomment(block))["providers"]["autodl"]
    assert {"base_url", "credentials_file"} <= set(table)
    config = AutoDLConfig(**table)  # every key shown is one the adapter accepts
    assert config.base_url == "https://api.autodl.com"
