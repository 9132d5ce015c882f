"""A config file saved as "UTF-8 with BOM" (Windows Notepad and others) is read as the same
file without it: every reader of costctl.toml (the settings, the early language choice, the
written-float lookup) agrees, and only one leading BOM is dropped."""

from __future__ import annotations

import tomllib
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.cli.language import configured_language
from costctl.config import load_settings
from costctl.errors import ConfigError
from costctl.tomlfile import UTF8_BOM, loads_bytes

TEXT = '[ui]\nlanguage = "zh_CN"\n\n[policies.idle]\nmin_gpu_utilization = 7.5\n\n[policies.budget]\ntotal = "12.50"\n'


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "costctl.toml"
    path.write_bytes(data)
    return path


def test_a_bom_config_loads_as_the_same_settings(tmp_path: Path) -> None:
    plain = load_settings(write(tmp_path, TEXT.encode()))
    with_bom = load_settings(write(tmp_path, UTF8_BOM + TEXT.encode()))
    assert with_bom.model_dump() == plain.model_dump()
    assert with_bom.policies.idle.min_gpu_utilization == 7.5


def test_the_early_language_choice_reads_a_bom_config(tmp_path: Path) -> None:
    write(tmp_path, UTF8_BOM + TEXT.encode())
    assert configured_language(["watch"], {}, tmp_path) == "zh_CN"


def test_a_bom_config_still_names_a_bad_value_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, UTF8_BOM + b"[policies.idle]\nmin_gpu_utilization = 1e400\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "1e400" in info.value.message and "\n" not in info.value.message


@pytest.mark.parametrize("data", [UTF8_BOM + UTF8_BOM + TEXT.encode(), b"a = 1\n" + UTF8_BOM])
def test_only_one_leading_bom_is_dropped(data: bytes) -> None:
    with pytest.raises(tomllib.TOMLDecodeError):
        loads_bytes(data)


def test_loads_bytes_reads_decimal_strings_unchanged() -> None:
    assert loads_bytes(UTF8_BOM + b'x = "12.50"\n') == {"x": "12.50"}
    assert Decimal(loads_bytes(b'x = "0.10"')["x"]) == Decimal("0.10")


def test_a_bom_config_through_the_real_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from costctl.cli.main import main

    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    path = write(tmp_path, UTF8_BOM + b'[ui]\nlanguage = "en"\n[policies.idle]\ntime_window = "bogus"\n')
    assert main(["bill", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "time_window" in err and "not valid TOML" not in err and err.count("\n") == 1
