"""Issue 17, part 1 (config side): every duration, amount, count and percentage has a documented
range, checked at load: one line naming the key (or the environment variable), the value and the
range, exit status 2, nothing started. The regression tests are named after the cases of the
fault suite's report; the property tests feed the loader and the parsers arbitrary input, which
must give a value within its documented range or a CostctlError, never another exception."""

from __future__ import annotations

import json
import math
import re
import tomllib
import typing
from datetime import timedelta
from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from costctl.cli.main import main
from costctl.config import Settings, key_range, load_settings, settings_model
from costctl.config_types import (
    MAX_DURATION,
    MIN_DURATION,
    ValueRange,
    parse_duration,
    parse_window,
    value_range,
)
from costctl.errors import ConfigError, CostctlError
from costctl.money import AMOUNT_PLACES, MAX_AMOUNT, AmountError, bounded_amount

REPO = Path(__file__).resolve().parents[1]


def load(tmp_path: Path, toml: str) -> Settings:
    path = tmp_path / "off.toml"
    path.write_text(toml, encoding="utf-8")
    return load_settings(path)


def refused(tmp_path: Path, toml: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, toml)
    message = info.value.message
    assert "\n" not in message and info.value.exit_code == 2
    return message


# --------------------------------------------------------------------------- the report's cases


@pytest.mark.parametrize("value", ["1e400", "inf", "1e308", "18446744073709551616", '"2**64"', '"1e400"', "nan"])
def test_config_duration_1e400_is_a_one_line_error(tmp_path, value):
    """Durations of 1e400, inf, 1e308, 2**64 (TOML numbers and strings) crashed at load."""
    message = refused(tmp_path, f"[watch]\nsample_interval = {value}\n")
    assert message.startswith(f"{tmp_path / 'off.toml'}: watch.sample_interval = ")
    assert message.endswith("expected a duration from 1s to 8760h (a year), written like 90s, 30m, 2h, 1h30m "
                            "or a number of seconds")


@pytest.mark.parametrize("key", ["[watch]\nsample_interval", "[policies.idle]\ntime_window",
                                 "[policies.stall]\nstall_window", "[stop]\ndeadline", "[checkpoint]\nmtbf"])
def test_config_duration_9999999999h_is_refused_at_load_not_at_the_watch(tmp_path, key):
    """"9999999999h" was accepted and then crashed the watch (sample_interval) or every tick
    (time_window): now every duration has a maximum, checked at load."""
    message = refused(tmp_path, f'{key} = "9999999999h"\n')
    section, name = key.split("\n")
    assert f"{section.strip('[]')}.{name} = '9999999999h': expected a duration from 1s to 8760h (a year)" in message
    # the maximum itself is taken
    assert load(tmp_path, f'{key} = "8760h"\n') is not None


@pytest.mark.parametrize("cap", ['"1E+999999999"', '"1e10"', '"-1"', '"1e-400x"', "1e400", "nan"])
def test_config_budget_1e999999999_is_a_one_line_error(tmp_path, cap):
    """A budget of 1E+999999999 made every tick fail (no stop could fire); it is refused at load."""
    message = refused(tmp_path, f"[policies.budget]\ntotal = {cap}\n")
    assert "policies.budget.total = " in message
    assert message.endswith('expected an amount of money from 0 to 1000000000, like 2.5 or "2.50"')


def test_config_budget_1e_minus_400_is_zero_to_ten_places(tmp_path):
    """1e-400 (a string: TOML reads the float as 0.0) made every tick fail on the budget's
    fraction; amounts are kept to 10 decimals, so it is the cap 0 (act at once), as written."""
    s = load(tmp_path, '[policies.budget]\ntotal = "1e-400"\ndaily = "0.12345678901234"\n')
    assert s.policies.budget.total == 0 and str(s.policies.budget.total) == "0"
    assert s.policies.budget.daily == Decimal("0.1234567890")


@pytest.mark.parametrize("price", ['"1e26"', '"' + "9" * 80 + '"', "1e26", '"-0.5"'])
def test_config_price_1e26_or_80_digits_is_refused(tmp_path, price):
    """A price of about 1e26 or more (or with 80 digits) was accepted into the ledger; from then
    on `bill` and `instances` crashed."""
    message = refused(tmp_path, f"[instance]\nprice_per_hour = {price}\n")
    assert message.startswith(f"{tmp_path / 'off.toml'}: instance.price_per_hour = ")
    assert "from 0 to 1000000000" in message


def test_config_nul_byte_in_before_stop_is_a_one_line_error(tmp_path):
    """A NUL byte in the before_stop command crashed the watch at its stop; refused at load."""
    message = refused(tmp_path, '[hooks]\nbefore_stop = "rsync -a out/ /backup/\\u0000"\n')
    assert message == f"{tmp_path / 'off.toml'}: hooks.before_stop = 'rsync -a out/ /backup/\\x00': expected text without NUL bytes"
    # any text of the config: a NUL reaches no path, URL or command
    for toml, key in (('[checkpoint]\npath = "ckpt\\u0000/*.pt"\n', "checkpoint.path"),
                      ('data_dir = "/tmp/x\\u0000"\n', "data_dir"),
                      ('[instance]\nself_stop = "shutdown\\u0000"\n', "instance.self_stop"),
                      ('database_url = "sqlite:///x\\u0000.db"\n', "database_url")):
        message = refused(tmp_path, toml)
        assert f": {key} = " in message and message.endswith("without NUL bytes"), message


def test_config_env_var_error_names_the_variable_not_the_file(tmp_path, monkeypatch):
    """COSTCTL_POLICIES__IDLE__TIME_WINDOW=abc was reported as `off.toml: policies.idle.time_window = 'abc'`."""
    monkeypatch.setenv("COSTCTL_POLICIES__IDLE__TIME_WINDOW", "abc")
    message = refused(tmp_path, '[policies.idle]\ntime_window = "10m"\n')
    assert message == ("environment variable COSTCTL_POLICIES__IDLE__TIME_WINDOW = 'abc': expected a duration from "
                       "1s to 8760h (a year), written like 90s, 30m, 2h, 1h30m or a number of seconds, or off")
    assert "off.toml" not in message


def test_env_var_mistakes_of_every_kind_name_the_variable(tmp_path, monkeypatch):
    cases = [
        ("COSTCTL_INSTANCE__GPU_COUNT", "1e400", "environment variable COSTCTL_INSTANCE__GPU_COUNT = '1e400': "
                                                 "expected a number from 1 to 64"),
        ("COSTCTL_POLICIES__IDLE__TIME_WINDOWS", "5m",
         "unknown environment variable COSTCTL_POLICIES__IDLE__TIME_WINDOWS (no key 'policies.idle.time_windows' "
         "in the config; `costctl init` writes every key)"),
        ("COSTCTL_POLICIES__IDLE", '{"time_window": "abc"}',
         "environment variable COSTCTL_POLICIES__IDLE: policies.idle.time_window = 'abc': expected a duration"),
        ("COSTCTL_POLICIES__IDLE", "notjson",
         "environment variable COSTCTL_POLICIES__IDLE = 'notjson': expected a JSON object for the table "
         "[policies.idle], or one variable per key (COSTCTL_POLICIES__IDLE__<KEY>=...)"),
        ("costctl_watch__sample_interval", "9999999999h",
         "environment variable costctl_watch__sample_interval = '9999999999h': expected a duration from 1s"),
    ]
    for name, value, says in cases:
        with monkeypatch.context() as m:
            m.setenv(name, value)
            message = refused(tmp_path, '[policies.idle]\ntime_window = "10m"\n')
            assert message.startswith(says), (name, message)
    # a bad value in the file still names the file, even while other variables are set
    monkeypatch.setenv("COSTCTL_POLICIES__IDLE__MIN_GPU_UTILIZATION", "5")
    assert refused(tmp_path, '[policies.idle]\ntime_window = "abc"\n').startswith(
        f"{tmp_path / 'off.toml'}: policies.idle.time_window = 'abc'")
    # a command-line option's value names neither
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"policies": {"idle": {"time_window": "9999999999h"}}})
    assert info.value.message.startswith("policies.idle.time_window = '9999999999h'")


def test_a_bad_env_var_through_the_cli_is_exit_2_and_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COSTCTL_POLICIES__BUDGET__DAILY", "1E+999999999")
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    assert main(["bill"]) == 2
    err = capsys.readouterr().err
    assert err == ("costctl: environment variable COSTCTL_POLICIES__BUDGET__DAILY = '1E+999999999': expected an "
                   "amount of money from 0 to 1000000000, like 2.5 or \"2.50\"\n")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("toml, says", [
    ("[policies.plateau]\npatience = 18446744073709551616", "policies.plateau.patience = 18446744073709551616: "
                                                           "expected a number from 0 to 1000000"),
    ("[policies.idle]\nmin_gpu_utilization = nan", "policies.idle.min_gpu_utilization = nan: expected a number "
                                                   "from 0 to 100"),
    ("[policies.not_learning]\nmin_drop = inf", "policies.not_learning.min_drop = inf: expected a number > 0 and "
                                                "<= 1000"),
    ("[watch]\ntotal_steps = 1e400", "watch.total_steps = 1e400: expected a number from 1 to 1000000000000"),
    ("[downsize]\npeak_memory = \"2PiB\"", "downsize.peak_memory = '2PiB': expected a number from 1 byte to 1PiB"),
    ("[[catalog.exchange_rates]]\nbase = \"USD\"\nquote = \"CNY\"\nrate = \"1e-400\"\nas_of = 2026-01-01",
     "catalog.exchange_rates.0.rate = '1e-400': expected a number from 0.000001 to 1000000"),
])
def test_counts_and_numbers_name_their_whole_range(tmp_path, toml, says):
    assert refused(tmp_path, toml + "\n").endswith(says)


# --------------------------------------------------------------------------- the documented ranges


def _leaf_fields(model: type[BaseModel], prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    for name, field in model.model_fields.items():
        inner = field.annotation
        args = [a for a in typing.get_args(inner) if a is not type(None)]
        sub = args[0] if len(args) == 1 else inner
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            yield from _leaf_fields(sub, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def _range_bounds(field) -> tuple[typing.Any, typing.Any]:
    """(lowest, highest) a ranged field takes, from its ValueRange text or its bounds."""
    metadata = list(field.metadata) + [m for a in typing.get_args(field.annotation)
                                       for m in getattr(a, "__metadata__", ())]
    text = next((m.text for m in metadata if isinstance(m, ValueRange)), None)
    if text is not None and text.startswith("0 to 1000000000"):
        return Decimal(0), MAX_AMOUNT
    if text is not None and re.match(r"^\d+[smh] to \d+[smh]", text):
        low, high = text.split(",")[0].split(" to ")
        return parse_duration(low, minimum=timedelta(0), maximum=None), parse_duration(high, minimum=timedelta(0),
                                                                                       maximum=None)
    low = next((getattr(m, n) for m in metadata for n in ("ge", "gt") if getattr(m, n, None) is not None), None)
    high = next((getattr(m, n) for m in metadata for n in ("le", "lt") if getattr(m, n, None) is not None), None)
    return low, high


def ranged_fields() -> list[tuple[str, typing.Any]]:
    return [(key, field) for key, field in _leaf_fields(settings_model()) if value_range(field)]


def _base_type(annotation: typing.Any) -> typing.Any:
    """The type under Optional[...] and Annotated[...]."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType")) and len(args) == 1:
            annotation = args[0]
            continue
        return annotation


def test_every_number_and_duration_of_the_config_has_a_documented_range():
    """No duration, amount, count or percentage is left unbounded: every such key of the
    settings has a range with both ends."""
    checked = 0
    for key, field in _leaf_fields(settings_model()):
        base = _base_type(field.annotation)
        if not isinstance(base, type) or base is bool or not issubclass(base, (int, float, Decimal, timedelta)):
            continue
        checked += 1
        low, high = _range_bounds(field)
        assert low is not None and high is not None, f"{key} has no range ({value_range(field)!r})"
    assert checked >= 60


def test_init_writes_every_key_s_range_in_its_comment(tmp_path):
    """`costctl init`'s comments give each key's range, with the same numbers as the code."""
    assert main(["init", str(tmp_path / "costctl.toml")]) == 0
    text = (tmp_path / "costctl.toml").read_text()
    lines = text.splitlines()
    shown = 0
    section = ""
    for i, line in enumerate(lines):
        head = re.match(r"^#? ?\[\[?([\w.]+)\]\]?", line)
        if head:
            section = head.group(1) + "."
            continue
        m = re.match(r"^#? ?(\w+) = ", line)
        if not m:
            continue
        rng = key_range(tuple((section + m.group(1)).split(".")))
        if rng:
            shown += 1
            # the key's comment: its line and the indented comment lines continuing it (wrapped
            # at the line width), joined as one sentence
            comment = [line]
            for more in lines[i + 1:]:
                if not re.match(r"^\s+#", more):
                    break
                comment.append(more.split("#", 1)[1].strip())
            joined = " ".join(comment)
            assert f"({rng})" in joined, f"{section}{m.group(1)}: {joined!r} lacks ({rng})"
    assert shown >= 50
    keys = {key for key, _ in ranged_fields() if not key.startswith(("catalog.", "providers."))}
    for key in keys:
        name = key.rsplit(".", 1)[1]
        assert re.search(rf"^#? ?{name} = ", text, re.M), f"costctl init does not show {key}"


def test_the_docs_table_lists_every_range():
    """docs/configuration.md has one row per ranged key, with the code's range."""
    doc = (REPO / "docs" / "configuration.md").read_text()
    for key, field in ranged_fields():
        if key.startswith("providers."):
            continue
        rng = value_range(field)
        assert f"| `{key}` | {rng} |" in doc, f"docs/configuration.md lacks the row of {key} ({rng})"


def test_the_shipped_example_loads_and_equals_the_defaults(tmp_path):
    text = resources.files("costctl").joinpath("data/costctl.example.toml").read_text(encoding="utf-8")
    path = tmp_path / "costctl.toml"
    path.write_text(text)
    assert load_settings(path).model_dump() == Settings().model_dump()


# --------------------------------------------------------------------------- property tests

#: Values a fault suite throws at a key: huge and tiny numbers, non-finite ones, duration and
#: money spellings near and past every bound, NUL bytes, wrong types.
EDGE_TEXT = ["1e400", "inf", "-inf", "nan", "1e308", "2**64", "9999999999h", "8760h", "8760h1s", "1e-400", "0",
             "-0", "-1", "1E+999999999", "0.00000000001", "1000000000", "1000000000.1", "off", "", " ", "5m",
             "1h30m", "\x00", "abc", "9" * 80, "0." + "1" * 80, "99999999999999999999999", "30", "1s", "0.5s"]
scalars = st.one_of(
    st.integers(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_TEXT), st.text(max_size=20), st.booleans(),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
)


def toml_scalar(value: typing.Any) -> str:
    """A Python scalar as a TOML value (test-side: json's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 2**63 else json.dumps(str(value))  # TOML integers are 64-bit
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    return json.dumps(value)


def _check_in_range(key: str, field, value: typing.Any) -> None:
    if value is None or isinstance(value, bool):
        return
    low, high = _range_bounds(field)
    if isinstance(value, (int, float)):
        assert math.isfinite(value), (key, value)
    if isinstance(value, Decimal):
        assert value.is_finite(), (key, value)
        if low == Decimal(0) and high == MAX_AMOUNT:
            assert -value.as_tuple().exponent <= AMOUNT_PLACES, (key, value)
    if low is not None:
        assert value >= low, (key, value, low)
    if high is not None:
        assert value <= high, (key, value, high)


@given(st.data())
def test_config_loader_gives_a_value_in_range_or_one_config_error(tmp_path_factory, data):
    """Any value for any key: the loaded value lies within the key's documented range, or the
    load is one ConfigError line. Never another exception."""
    fields = ranged_fields()
    picked = data.draw(st.lists(st.sampled_from([k for k, _ in fields if not k.startswith("catalog.")]),
                                min_size=1, max_size=3, unique=True))
    tables: dict[str, list[str]] = {}
    for key in picked:
        section, name = key.rsplit(".", 1)
        tables.setdefault(section, []).append(f"{name} = {toml_scalar(data.draw(scalars))}")
    toml = "".join(f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in tables.items())
    path = tmp_path_factory.mktemp("cfg") / "off.toml"
    path.write_text(toml, encoding="utf-8")
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        assert exc.message and "\n" not in exc.message and exc.exit_code == 2
        return
    by_key = dict(fields)
    for key in picked:
        node: typing.Any = settings
        for part in key.split("."):
            node = getattr(node, part)
        _check_in_range(key, by_key[key], node)


@given(st.one_of(scalars, st.timedeltas(), st.none()),
       st.sampled_from([(MIN_DURATION, MAX_DURATION), (timedelta(hours=1), timedelta(days=3650)),
                        (timedelta(0), timedelta(hours=1)), (timedelta(minutes=5), None)]))
def test_duration_parsers_give_a_duration_in_range_or_a_value_error(value, bounds):
    """parse_duration / parse_window (the validators behind every duration key and option):
    a timedelta within the bounds, None (off) for a window, or ValueError (pydantic's, turned
    into one line by the loader) — never OverflowError, InvalidOperation or TypeError."""
    minimum, maximum = bounds
    for parse in (parse_duration, parse_window):
        try:
            got = parse(value, minimum=minimum, maximum=maximum)
        except ValueError as exc:
            assert str(exc).startswith("expected ")
            continue
        if got is None:
            assert parse is parse_window
            continue
        assert minimum <= got and (maximum is None or got <= maximum)


@given(st.one_of(scalars, st.decimals(), st.none(), st.lists(st.integers(), max_size=2)))
def test_money_parser_gives_an_amount_in_range_or_an_amount_error(value):
    """bounded_amount (every amount taken in: config, --price, providers): a finite Decimal in
    [0, 10^9] with at most 10 decimals, or AmountError (a CostctlError, exit 2)."""
    try:
        got = bounded_amount(value)
    except AmountError as exc:
        assert isinstance(exc, CostctlError) and exc.exit_code == 2 and "\n" not in exc.message
        return
    assert isinstance(got, Decimal) and got.is_finite() and 0 <= got <= MAX_AMOUNT
    assert -got.as_tuple().exponent <= AMOUNT_PLACES and not got.is_signed()
    assert abs(got - Decimal(repr(value) if isinstance(value, float) else str(value)).copy_abs()) <= \
        Decimal(1).scaleb(-AMOUNT_PLACES) / 2 or got == 0


def test_the_example_config_parses_as_toml():
    text = resources.files("costctl").joinpath("data/costctl.example.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text)["watch"]["sample_interval"] == "5s"
