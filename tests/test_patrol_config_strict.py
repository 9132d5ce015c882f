"""``[[patrol.policies]]`` filters that can match nothing, or name what is not there, are one
config error line each (the policy's index, the key, the value, what is allowed), exit status 2,
before anything is read or acted on: an empty list, a currency costctl does not know, an
account or a provider that is not configured, a boolean written as text or a number, an
unknown status word."""

from __future__ import annotations

from pathlib import Path

import pytest

from costctl.config import load_settings
from costctl.errors import ConfigError
from tests.test_patrol_cli import patrol, run, table  # noqa: F401 - the fixture

HEAD = ('[instance]\nprovider = "sim"\n\n[providers.vastai]\n\n'
        '[providers.vastai.accounts.team]\ncredential_env = "T"\n\n')


def policy(filters: str, *, action: str = "stop", extra: str = "") -> str:
    return f'[[patrol.policies]]\nname = "p0"\naction = "notify"\nfilters = {{status = "running"}}\n\n' \
           f'[[patrol.policies]]\nname = "bad"\naction = "{action}"\n{extra}filters = {{{filters}}}\n'


CASES = [
    ('label = []', "patrol.policies.1.filters.label = []: expected at least one value (an empty list matches no "
                   "instance); leave the filter out to match every instance"),
    ('status = []', "patrol.policies.1.filters.status = []: expected at least one value"),
    ('provider = []', "patrol.policies.1.filters.provider = []: expected at least one value"),
    ('account = []', "patrol.policies.1.filters.account = []: expected at least one value"),
    ('spend_over = "5", currency = "XYZ"', "patrol.policies.1.filters.currency = 'XYZ': expected an ISO 4217 "
                                           "currency code costctl knows, like USD, CNY or EUR"),
    ('spend_over = "5", currency = "XXX"', "patrol.policies.1.filters.currency = 'XXX': expected an ISO 4217"),
    ('account = "nosuch"', "patrol.policies.1.filters.account.0 = 'nosuch': no account 'nosuch' is configured for "
                           "sim, vastai; expected default (a provider's default account) or one of: team (vastai)"),
    ('provider = "sim", account = "team"', "patrol.policies.1.filters.account.0 = 'team': no account 'team' is "
                                           "configured for sim; expected default (a provider's default account) or "
                                           "one of: none"),
    ('guarded = "no"', "patrol.policies.1.filters.guarded = 'no': expected true or false"),
    ('guarded = 0', "patrol.policies.1.filters.guarded = 0: expected true or false"),
    ('status = "runing"', "patrol.policies.1.filters.status.0 = 'runing': expected 'provisioning', 'starting', "
                          "'running', 'stopping', 'stopped', 'terminated', 'error' or 'unknown'"),
    ('provider = ["vastai", "runpod"]', "patrol.policies.1.filters.provider.1 = 'runpod': provider 'runpod' is not "
                                       "configured (no [providers.runpod] table, and [instance] provider is sim); "
                                       "expected one of sim, vastai"),
]


@pytest.mark.parametrize("filters, says", CASES)
def test_an_impossible_or_misspelled_filter_is_one_line(tmp_path: Path, filters, says):
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + policy(filters))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.message == f"{path}: {says}" or info.value.message.startswith(f"{path}: {says}")
    assert "\n" not in info.value.message and info.value.exit_code == 2


def test_allow_release_must_be_a_toml_boolean(tmp_path: Path):
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + policy('stopped_for = "72h"', action="release", extra='allow_release = "yes"\n'))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.message == f"{path}: patrol.policies.1.allow_release = 'yes': expected true or false"


def test_what_is_configured_loads(tmp_path: Path):
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + policy('provider = "vastai", account = ["default", "team"], guarded = false, '
                                  'spend_over = "5", currency = "cny"'))
    f = load_settings(path).patrol.policies[1].filters
    assert (f.account, f.guarded, f.currency) == (["default", "team"], False, "CNY")


def test_the_cli_says_it_in_one_line_exits_2_and_acts_on_nothing(patrol, capsys):
    text = patrol.config.read_text()
    patrol.config.write_text(text.replace('filters = {account = "team", status = "running"',
                                          'filters = {account = "teem", status = "running"'))
    code, out, err = run(capsys, "patrol", "--execute")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "patrol.policies.2.filters.account.0 = 'teem': no account 'teem' is configured for" in err
    assert "one of: team (vastai)" in err
    assert table(patrol, "SELECT COUNT(*) FROM decisions") == [(0,)]
    assert table(patrol, "SELECT COUNT(*) FROM patrol_observations") == [(0,)]
    assert patrol.hook.messages == [] and patrol.vast.server.count("PUT") == 0
