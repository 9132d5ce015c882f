"""The shared config table of the HTTP adapters (costctl_providers._config) and the one-line
pydantic error formatter it shares with costctl's settings (costctl.validation)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from costctl.errors import ConfigError
from costctl.validation import one_line
from costctl_providers._config import load_table
from costctl_providers.autodl import AutoDLConfig
from costctl_providers.runpod import RunPodConfig
from costctl_providers.vastai import VastAIConfig

ADAPTERS = [("autodl", AutoDLConfig), ("vastai", VastAIConfig), ("runpod", RunPodConfig)]


@pytest.mark.parametrize(("name", "model"), ADAPTERS)
@pytest.mark.parametrize(
    ("table", "line"),
    [
        ({"base_url": "api.example.com"}, "base_url = 'api.example.com': expected an http:// or https:// URL"),
        ({"timeout": 0}, "timeout = 0: expected a number > 0 and <= 300"),
        ({"retries": 11}, "retries = 11: expected a number from 0 to 10"),
        ({"backoff": -1}, "backoff = -1: expected a number from 0 to 60"),
        ({"retries": "many"}, "retries = 'many': expected a number from 0 to 10"),
        ({"timeout": float("inf")}, "timeout = inf: expected a number > 0 and <= 300"),
        ({"poll_interval": 601}, "poll_interval = 601: expected a number > 0 and <= 600"),
        ({"stop_timeout": 0}, "stop_timeout = 0: expected a number > 0 and <= 86400"),
        ({"credentials_file": 3}, "credentials_file = 3: expected text"),
        ({"api_token": "x"}, "unknown key 'api_token'"),
        # Only the first problem is named for a provider table, with no count of the others.
        ({"timeout": 0, "retries": 11}, "timeout = 0: expected a number > 0 and <= 300"),
    ],
)
def test_common_keys_are_checked_alike_in_every_adapter(name, model, table, line):
    with pytest.raises(ConfigError) as err:
        load_table(model, name, table)
    assert str(err.value) == f"[providers.{name}] {line}"
    assert err.value.exit_code == 2


@pytest.mark.parametrize(("name", "model"), ADAPTERS)
def test_common_keys_defaults_and_trailing_slash(name, model):
    cfg = load_table(model, name, {"base_url": "http://127.0.0.1:8080/api/", "timeout": 2.5})
    assert cfg.base_url == "http://127.0.0.1:8080/api"
    assert (cfg.timeout, cfg.retries, cfg.backoff, cfg.poll_interval, cfg.stop_timeout) == (2.5, 3, 0.5, 5.0, 300.0)
    assert load_table(model, name, None).base_url.startswith("https://")


def test_autodl_console_url_is_an_http_url_too():
    with pytest.raises(ConfigError, match=r"^\[providers.autodl\] console_url = 'www.autodl.com': expected an http"):
        load_table(AutoDLConfig, "autodl", {"console_url": "www.autodl.com"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = "min"
    size: int = 1


def _error(**values) -> ValidationError:
    with pytest.raises(ValidationError) as err:
        _Model(**values)
    return err.value


def test_one_line_without_table_counts_the_other_problems_and_cuts_long_values():
    assert one_line(_error(size="x" * 100, mode=3)) == (
        "mode = 3: expected text (and 1 more problem)"
    )
    line = one_line(_error(size="y" * 100))
    assert line.startswith("size = 'yyy") and line.endswith("...: expected a whole number")
    assert len(line.split(":")[0]) == len("size = ") + 60


def test_one_line_unknown_key_hint():
    assert one_line(_error(sise=2), unknown_hint="(see the docs)") == "unknown key 'sise' (see the docs)"
    assert one_line(_error(sise=2), table="providers.x") == "[providers.x] unknown key 'sise'"
