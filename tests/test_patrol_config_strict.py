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
    ('stopped_for = "168h", status = "running"',
     "patrol.policies.1.filters.stopped_for = '168h': stopped_for matches stopped instances only, and filters.status "
     "running leaves stopped out: add \"stopped\" to status or leave it out"),
    ('stopped_for = "1h", status = ["error", "terminated"]',
     "patrol.policies.1.filters.stopped_for = '1h': stopped_for matches stopped instances only, and filters.status "
     "error, terminated leaves stopped out"),
    ('stopped_for = "1h", idle = "1h"', "patrol.policies.1.filters.stopped_for = '1h': stopped_for matches stopped "
                                        "instances only, and idle running ones: no instance matches both"),
    ('idle = "1h", status = "stopped"', "patrol.policies.1.filters.idle = '1h': idle reads utilization, which only a "
                                        "running instance reports, and filters.status stopped leaves running out"),
    ('label = [""]', "patrol.policies.1.filters.label = ['']: a label pattern is empty and matches no instance; "
                     "expected a pattern such as \"team-*\""),
    ('label = ["team-*", " "]', "patrol.policies.1.filters.label = ['team-*', ' ']: a label pattern is empty"),
    ('status = "running", min_gpu_utilization = 5',
     "patrol.policies.1.filters.min_gpu_utilization = 5: min_gpu_utilization is the threshold of the idle filter "
     "and has no effect without it: set idle too, or leave min_gpu_utilization out"),
    ('status = "running", min_cpu_utilization = 20',
     "patrol.policies.1.filters.min_cpu_utilization = 20: min_cpu_utilization is the threshold of the idle filter"),
    ('spend_over = "5"', "patrol.policies.1.filters.currency = None: spend_over needs the currency it is in (no "
                         "conversion): set currency too"),
]

MATCHABLE = ['stopped_for = "1h", status = ["stopped", "running"]', 'stopped_for = "1h", status = "stopped"',
             'idle = "1h", status = ["running", "stopped"]', 'idle = "1h", min_gpu_utilization = 3, '
             'min_cpu_utilization = 20', 'label = "team-*"']


@pytest.mark.parametrize("filters", MATCHABLE)
def test_a_filter_that_can_match_loads(tmp_path: Path, filters):
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + policy(filters))
    assert load_settings(path).patrol.policies[1].filters is not None


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


@pytest.mark.parametrize("before, after, says", [
    ('status = "running", spend_over', 'status = "running", stopped_for = "168h", spend_over',
     "patrol.policies.2.filters.stopped_for = '168h': stopped_for matches stopped instances only"),
    ('idle = "30m"}', 'idle = "30m"}\n\n[[patrol.policies]]\nname = "t"\naction = "notify"\n'
     'filters = {label = [""]}', "patrol.policies.1.filters.label = ['']: a label pattern is empty"),
])
def test_a_contradiction_is_one_line_exit_2_and_nothing_acted(patrol, capsys, before, after, says):
    text = patrol.config.read_text()
    assert before in text
    patrol.config.write_text(text.replace(before, after, 1))
    code, out, err = run(capsys, "patrol", "--execute")
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err
    assert table(patrol, "SELECT COUNT(*) FROM decisions") == [(0,)]
    assert patrol.hook.messages == [] and patrol.vast.server.count("PUT") == 0


def test_a_misspelled_filters_key_is_the_line_shown(tmp_path: Path):
    """``filter = {...}`` (for ``filters``): the unknown key is the cause, so it leads; the missing
    filters it causes is not the line, nor does it hide the unknown key in "(and 1 more problem)"."""
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + '[[patrol.policies]]\nname = "bad"\naction = "stop"\nfilter = {status = "running"}\n')
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.message == (f"{path}: unknown key 'patrol.policies.0.filter' (check the spelling; "
                                  "`costctl init` writes every key)")


@pytest.mark.parametrize("filters, key", [("min_gpu_utilization = 10", "min_gpu_utilization"),
                                          ("min_cpu_utilization = 20", "min_cpu_utilization")])
def test_a_threshold_alone_says_it_needs_idle(tmp_path: Path, filters, key):
    path = tmp_path / "costctl.toml"
    path.write_text(HEAD + f'[[patrol.policies]]\nname = "bad"\naction = "stop"\nfilters = {{{filters}}}\n')
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.message.startswith(f"{path}: patrol.policies.0.filters = ")
    assert info.value.message.endswith(f": {key} is the threshold of the idle filter and has no effect without it: "
                                       f"set idle too, or leave {key} out")
    assert "set at least one filter" not in info.value.message
