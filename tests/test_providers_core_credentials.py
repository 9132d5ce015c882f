"""Credentials: environment variables, a mode-0600 credentials file, and never printing a token."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from costctl.errors import ConfigError
from costctl_providers.credentials import Credential, load_credential

TOKEN = "tok_4c1d2b3a99887766"


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_env_var_wins(tmp_path):
    write(tmp_path / "credentials.toml", '[vastai]\napi_key = "from-file-1234"\n', 0o600)
    cred = load_credential("vastai", {}, data_dir=tmp_path, env={"VAST_API_KEY": TOKEN})
    assert cred == Credential("vastai", "VAST_API_KEY", TOKEN)


@pytest.mark.parametrize("provider,var", [("vastai", "VAST_API_KEY"), ("runpod", "RUNPOD_API_KEY"), ("autodl", "AUTODL_TOKEN")])
def test_usual_env_vars(tmp_path, provider, var):
    cred = load_credential(provider, {}, data_dir=tmp_path, env={var: f" {TOKEN}\n"})
    assert cred is not None and cred.secret == TOKEN and cred.name == var


def test_file_in_data_dir_with_mode_0600(tmp_path):
    path = write(tmp_path / "credentials.toml", f'[autodl]\ntoken = "{TOKEN}"\n', 0o600)
    cred = load_credential("autodl", {}, data_dir=tmp_path, env={})
    assert cred is not None and cred.secret == TOKEN
    assert cred.name == f"credentials file {path} [autodl] token"


def test_file_path_from_config_and_other_key(tmp_path):
    path = write(tmp_path / "elsewhere.toml", f'[autodl]\nconsole_token = "{TOKEN}"\n', 0o600)
    cred = load_credential("autodl", {"credentials_file": str(path)}, data_dir=tmp_path / "none", env={},
                           env_var="", keys=("console_token",))
    assert cred is not None and cred.secret == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o700 | 0o040])
def test_group_or_world_accessible_file_is_refused(tmp_path, mode):
    path = write(tmp_path / "credentials.toml", f'[vastai]\napi_key = "{TOKEN}"\n', mode)
    with pytest.raises(ConfigError) as err:
        load_credential("vastai", {}, data_dir=tmp_path, env={})
    msg = err.value.message
    assert f"chmod 600 {path}" in msg and f"{mode & 0o777:04o}" in msg
    assert TOKEN not in msg
    assert err.value.exit_code == 2


def test_mode_0400_is_accepted(tmp_path):
    write(tmp_path / "credentials.toml", f'[vastai]\napi_key = "{TOKEN}"\n', 0o400)
    assert load_credential("vastai", {}, data_dir=tmp_path, env={}).secret == TOKEN


def test_nothing_configured_says_how(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_credential("vastai", {}, data_dir=tmp_path, env={})
    msg = err.value.message
    assert "set VAST_API_KEY" in msg and str(tmp_path / "credentials.toml") in msg and "chmod 600" in msg
    assert load_credential("vastai", {}, data_dir=tmp_path, env={}, required=False) is None


def test_explicit_file_missing(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_credential("vastai", {"credentials_file": str(tmp_path / "nope.toml")}, data_dir=tmp_path, env={})


def test_bad_toml_never_quotes_the_file(tmp_path):
    write(tmp_path / "credentials.toml", f'[vastai]\napi_key = "{TOKEN}\n', 0o600)  # unterminated string
    with pytest.raises(ConfigError) as err:
        load_credential("vastai", {}, data_dir=tmp_path, env={})
    assert "not valid TOML" in err.value.message and TOKEN not in err.value.message


def test_wrong_shapes(tmp_path):
    write(tmp_path / "credentials.toml", "vastai = 3\n", 0o600)
    with pytest.raises(ConfigError, match=r"\[vastai\] must be a table"):
        load_credential("vastai", {}, data_dir=tmp_path, env={})
    write(tmp_path / "credentials.toml", "[vastai]\napi_key = 42\n", 0o600)
    with pytest.raises(ConfigError, match="must be a non-empty string"):
        load_credential("vastai", {}, data_dir=tmp_path, env={})


def test_credential_never_shows_its_secret():
    cred = Credential("vastai", "VAST_API_KEY", TOKEN)
    assert TOKEN not in repr(cred) and TOKEN not in str(cred) and TOKEN not in f"{cred}"
