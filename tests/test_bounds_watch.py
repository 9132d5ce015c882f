"""Issue 17, part 1 (the watch side): no value that passed validation can later make a tick, the
ledger or the bill fail. A property test draws random valid configurations (every ranged key,
anywhere in its documented range), runs simulated ticks with random telemetry and random job
output on a real watcher (simulated provider, real SQLite ledger), and bills the result in every
grouping and format, without an exception. The report's watch-side cases are named regression
tests: the provider's negative or absurd price, the NUL byte of before_stop, budgets and
windows at their extremes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import typing
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.cli.bill import GroupBy
from costctl.cli.bill import bill as bill_command
from costctl.cli.common import OutputFormat
from costctl.cli.instances import instances as instances_command
from costctl.cli.main import main
from costctl.config import HooksConfig, load_settings, settings_model
from costctl.config_types import value_range
from costctl.errors import ConfigError
from costctl.ledger.schema import Charge, Instance as InstanceRow
from costctl.money import MAX_AMOUNT
from costctl.records import GpuReading, SignalStatus, TelemetrySample
from costctl.watch import Watcher, WatchOptions
from lifecycle_support import T0, FixedGpu, SimClock, drive, settings as settings_from_toml, watcher
from test_bounds_config import _base_type, _leaf_fields, _range_bounds
from tests.provider_rigs import RIGS

#: What a watch says when something that passed validation failed later (the faults of the report).
FAILURES = ("error during a tick", "failed and is skipped", "a ledger write failed", "internal error", "Traceback")

#: Keys the property test leaves at their defaults: text and paths, choices that reach outside
#: this machine (a cloud's metadata service), and what only slows it down (the status line).
SKIPPED = {"instance.provider", "instance.account", "instance.id", "instance.gpu", "instance.self_stop",
           "instance.currency", "watch.timezone", "watch.status_line", "preemption.source",
           "preemption.aws_base_url", "preemption.gcp_base_url", "preemption.azure_base_url", "hooks.before_stop",
           "checkpoint.path", "checkpoint.signal", "database_url", "data_dir", "providers"}


def _value(field: typing.Any) -> st.SearchStrategy[typing.Any] | None:
    """A strategy for any valid value of ``field``, biased to the ends of its range (as the
    TOML/environment text a user writes: durations and money as strings)."""
    choices = [a for a in typing.get_args(_base_type(field.annotation))] \
        if typing.get_origin(_base_type(field.annotation)) is typing.Literal else None
    if choices:
        return st.sampled_from(choices)
    base = _base_type(field.annotation)
    if base is bool:
        return st.booleans()
    rng = value_range(field)
    if not rng:
        return None
    low, high = _range_bounds(field)
    optional = type(None) in typing.get_args(field.annotation)
    if isinstance(low, timedelta):
        lo, hi = int(low.total_seconds()), int(high.total_seconds())
        seconds = st.one_of(st.sampled_from([lo, hi, max(lo, min(hi, 5)), max(lo, min(hi, 3600))]),
                            st.integers(min_value=lo, max_value=hi))
        text = seconds.map(str)
        return st.one_of(text, st.just("off")) if "or off" in rng else text
    if isinstance(low, Decimal) and high == MAX_AMOUNT:
        amount = st.one_of(st.sampled_from(["0", "0.0000000001", "1000000000", "0.01", "2.5"]),
                           st.decimals(min_value=0, max_value=MAX_AMOUNT, places=10).map(str))
        return st.one_of(amount, st.none()) if optional else amount
    metadata = list(field.metadata) + [m for a in typing.get_args(field.annotation)
                                       for m in getattr(a, "__metadata__", ())]
    exclude_low = any(getattr(m, "gt", None) is not None for m in metadata)
    exclude_high = any(getattr(m, "lt", None) is not None for m in metadata)
    if isinstance(base, type) and issubclass(base, int):
        lo = int(low) + (1 if exclude_low else 0)
        hi = int(high) - (1 if exclude_high else 0)
        number: st.SearchStrategy[typing.Any] = st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi))
    else:
        number = st.floats(min_value=float(low), max_value=float(high), exclude_min=exclude_low,
                           exclude_max=exclude_high, allow_nan=False)
    return st.one_of(number, st.none()) if optional else number


def _tables(model: typing.Any) -> dict[str, tuple[str, typing.Any]]:
    return {key: field for key, field in _leaf_fields(model)
            if key not in SKIPPED and not key.startswith(("catalog.", "providers.", "patrol.policies."))}  # patrol's policies: a list of tables the watch never reads


@st.composite
def valid_configs(draw: st.DrawFn) -> dict[str, typing.Any]:
    """Overrides (nested dict) setting a random half of the keys to random valid values; the two
    cross-key rules (stop intervals within the deadline, checkpoint min <= max) kept."""
    fields = _tables(settings_model())
    out: dict[str, typing.Any] = {}
    for key in sorted(fields):  # each key set (anywhere in its range) or left at its default, half and half
        strategy = _value(fields[key])
        if strategy is None or not draw(st.booleans()):
            continue
        node = out
        *path, name = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[name] = draw(strategy)
    if "stop" in out:
        stop = out["stop"]
        given_ = [int(stop[k]) for k in ("poll_interval", "resend_interval", "deadline") if k in stop]
        stop["deadline"] = str(max(given_ + [900]))  # the default deadline is 15m
    if "checkpoint" in out:
        cp = out["checkpoint"]
        lo, hi = int(cp.get("min_interval", 600)), int(cp.get("max_interval", 4 * 3600))
        cp["min_interval"], cp["max_interval"] = str(min(lo, hi)), str(max(lo, hi))
    return out


readings = st.builds(
    lambda util, used, total, status: (util, used, total, status),
    st.one_of(st.none(), st.floats(min_value=0, max_value=100), st.sampled_from([0.0, 100.0])),
    st.one_of(st.none(), st.integers(min_value=0, max_value=2**50)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=2**50)),
    st.sampled_from([SignalStatus.OK, SignalStatus.OK, SignalStatus.ERROR, SignalStatus.UNKNOWN]),
)

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["1e400", "-1e400", "nan", "inf", "9" * 400, "1e308", "2e-400", "0"]),
                    st.integers(min_value=-(10**30), max_value=10**30).map(str))
lines = st.one_of(
    numbers.map(lambda x: f"loss: {x}"),
    st.tuples(numbers, numbers).map(lambda t: f"step {t[0]} loss={t[1]}"),
    st.tuples(numbers, numbers, numbers).map(lambda t: f"{{'loss': {t[0]}, 'grad_norm': {t[1]}, 'epoch': {t[2]}}}"),
    st.tuples(numbers, numbers).map(lambda t: f"Epoch [{t[0]}/{t[1]}] Step [1/2] loss: 0.5"),
    st.tuples(numbers, numbers).map(lambda t: f"[D loss: {t[0]}] [G loss: {t[1]}]"),
    st.tuples(numbers, numbers).map(lambda t: f"eval_loss: {t[0]} val_loss={t[1]}"),
    st.text(max_size=40),
)


class RandomGpus:
    """A sampler reporting the drawn readings, one list per tick (then the last one again)."""

    def __init__(self, ticks: list[list[tuple]], cpu: list[float | None]) -> None:
        self.ticks, self.cpu, self.n = ticks, cpu, 0

    def sample(self, now):
        gpus = self.ticks[min(self.n, len(self.ticks) - 1)]
        cpu = self.cpu[min(self.n, len(self.cpu) - 1)]
        self.n += 1
        readings = tuple(GpuReading(index=i, name="NVIDIA GeForce RTX 4090", utilization=u, memory_used_bytes=used,
                                    memory_total_bytes=total, error=None if s is SignalStatus.OK else "drawn")
                         for i, (u, used, total, s) in enumerate(gpus))
        status = gpus[0][3] if gpus else SignalStatus.ABSENT
        return TelemetrySample(time=now, gpus=readings, gpu_status=status, cpu_percent=cpu,
                               cpu_status=SignalStatus.OK if cpu is not None else SignalStatus.UNKNOWN, source="drawn")


def _bill(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=12)
@given(config=valid_configs(),
       ticks=st.lists(st.tuples(st.lists(readings, min_size=1, max_size=3),
                                st.one_of(st.none(), st.floats(min_value=0, max_value=6400)),
                                st.lists(lines, max_size=6),
                                st.sampled_from([0, 1, 5, 60, 3600, 86400])), min_size=1, max_size=8),
       bills=st.lists(st.tuples(st.sampled_from(["run", "chain", "instance", "day", "gpu"]),
                                st.sampled_from(["table", "json", "csv"])), min_size=2, max_size=3))
def test_random_valid_configs_tick_and_bill_without_an_exception(tmp_path_factory, config, ticks, bills):
    tmp = tmp_path_factory.mktemp("watch")
    (tmp / "costctl.toml").write_text(f'data_dir = "{tmp / "data"}"\n[instance]\nprovider = "sim"\n'
                                      f'gpu = "RTX 4090"\n[watch]\nstatus_line = false\n')
    s = load_settings(tmp / "costctl.toml", config)  # valid by construction: a ConfigError fails the test
    clock = SimClock(T0)
    sampler = RandomGpus([t[0] for t in ticks], [t[1] for t in ticks])
    w = watcher(s, [], clock, sampler=sampler)
    said: list[str] = []
    w.say = said.append  # type: ignore[method-assign]
    w.start()
    result = None
    for _, _, out, advance in ticks:  # ticks at drawn instants (a day at most: a long gap is tested apart)
        now = clock.now()
        if out:
            w._progress_q.put(w._output.parse("stdout", ("\n".join(out) + "\n").encode(), now))
        w.poll_notices(now)
        w.tick(now)
        result = w.step()
        if result is not None:
            break
        clock.advance(advance)
    code, status = w.finish(*(result or (0, "completed")))
    assert not [line for line in said if any(f in line for f in FAILURES)], said
    # The commands' own functions, called directly: any exception fails the test (the CLI's
    # entry point would turn it into "internal error").
    cfg = tmp / "costctl.toml"
    for by, fmt in bills:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            bill_command(by=GroupBy(by), fmt=OutputFormat(fmt), config=cfg, db=f"sqlite:///{tmp / 'data' / 'costctl.db'}")
        if fmt == "json":
            assert all(Decimal(total) >= 0 for total in json.loads(out.getvalue())["totals"].values())
    with contextlib.redirect_stdout(io.StringIO()):
        instances_command(fmt=OutputFormat.json, config=cfg)


# --------------------------------------------------------------------------- the report's cases


def _run(tmp_path: Path, toml: str, *, ticks: int = 8, utilization: float = 90.0, step_s: float = 5) -> list[str]:
    s = settings_from_toml(tmp_path, toml)
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=utilization))
    said: list[str] = []
    w.say = said.append  # type: ignore[method-assign]
    w.start()
    result = None
    for k in range(ticks):
        if k:
            clock.advance(step_s)
        w.tick(clock.now())
        result = w.step()
        if result is not None:
            break
    w.finish(*(result or (0, "completed")))
    assert not [line for line in said if any(f in line for f in FAILURES)], said
    return said


@pytest.mark.parametrize("cap", ["1e-400", "0.0000000001", "1000000000"])
def test_budget_at_its_extremes_never_fails_a_tick(tmp_path, cap):
    """A budget of 1e-400 made every tick fail (the fraction's quantize), so no stop could fire;
    at the smallest and largest caps the policy evaluates, and a tiny cap stops."""
    said = _run(tmp_path, f'[instance]\ngpu = "RTX 4090"\n[policies.budget]\ntotal = "{cap}"\ndaily = "{cap}"\n')
    if cap != "1000000000":
        assert any(line.startswith("costctl budget: stopping") or "reached the" in line for line in said), said


@pytest.mark.parametrize("key", ['[watch]\nsample_interval = "8760h"', '[policies.idle]\ntime_window = "8760h"',
                                 '[policies.stall]\nstop_after = "8760h"\nstall_window = "8760h"',
                                 '[ledger]\nsample_retention = "87600h"\nprogress_interval = "1h"'])
def test_the_longest_durations_accepted_tick_without_overflow(tmp_path, key):
    """"9999999999h" crashed the watch (sample_interval) or every tick (time_window); the
    longest durations accepted tick on, and are said in the status and summary."""
    _run(tmp_path, f'[instance]\ngpu = "RTX 4090"\n{key}\n', ticks=4, step_s=5)


def test_a_tick_a_year_after_the_last_charges_the_whole_year(tmp_path):
    """The longest sample interval, a year, at the largest price: the tick a year after the first
    charges the year whole (10^9 x 8760 h), and the bill shows it."""
    _run(tmp_path, '[instance]\ngpu = "RTX 4090"\nprice_per_hour = "1000000000"\n[watch]\n'
                   'sample_interval = "8760h"\n', ticks=2, step_s=365 * 86400)
    code, out, err = _bill(["bill", "--format", "json", "-c", str(tmp_path / "costctl.toml")])
    assert code == 0, err
    assert json.loads(out)["totals"] == {"USD": "8760000000000.000000"}


def test_provider_negative_price_charges_the_configured_price_and_stores_nothing_absurd(tmp_path):
    """A provider reporting a negative price made every tick fail (the ledger refused the rate).
    It is refused at the boundary, said once, and the configured price is charged instead."""
    with contextlib.ExitStack() as stack:
        rig = stack.enter_context(contextlib.contextmanager(RIGS["vastai"])(tmp_path / "rig"))
        rig.fake.instances[rig.instance_id]["dph_total"] = -0.5
        s = settings_from_toml(tmp_path, f'[instance]\nprovider = "vastai"\nid = "{rig.instance_id}"\n'
                                         'price_per_hour = "0.30"\n[policies.idle]\ntime_window = "30s"\n')
        clock = SimClock(T0)
        fd = os.open(os.devnull, os.O_WRONLY)
        w = Watcher(s, WatchOptions(command=[], quiet=True, status_line=False), clock=clock, provider=rig.provider,
                    stdout_fd=fd, stderr_fd=fd, sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
        said: list[str] = []
        w.say = said.append  # type: ignore[method-assign]
        code, status = drive(w, clock, step_s=5, max_real_s=60)
    assert status == "stopped"
    assert ("costctl: vastai reported a price of -0.5 USD per hour for instance 312; expected an amount of money "
            "from 0 to 1000000000, like 2.5 or \"2.50\"; refused, charging the configured price $0.30 per hour "
            "([instance] price_per_hour) instead") in said
    assert not [line for line in said if any(f in line for f in FAILURES)], said
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        rates = {c.rate_per_hour for c in db.scalars(select(Charge))}
        prices = {i.price_per_hour for i in db.scalars(select(InstanceRow))}
    assert rates == {Decimal("0.30")} and prices == {Decimal("0.30")}


def test_provider_absurd_price_without_a_fallback_refuses_the_watch(tmp_path):
    """No configured price to fall back on: the watch refuses before anything starts, naming
    the provider's price (exit status 2)."""
    with contextlib.ExitStack() as stack:
        rig = stack.enter_context(contextlib.contextmanager(RIGS["vastai"])(tmp_path / "rig"))
        rig.fake.instances[rig.instance_id]["dph_total"] = 1e26
        s = settings_from_toml(tmp_path, f'[instance]\nprovider = "vastai"\nid = "{rig.instance_id}"\n')
        w = Watcher(s, WatchOptions(command=[], quiet=True, status_line=False), clock=SimClock(T0),
                    provider=rig.provider, sampler=FixedGpu(used_bytes=0, total_bytes=1, utilization=0.0))
        with pytest.raises(ConfigError) as info:
            w.start()
    assert info.value.message.startswith("vastai reported a price of 1E+26 USD per hour for instance 312; ")
    assert info.value.message.endswith("refused: set [instance] price_per_hour and currency to charge that price "
                                       "instead")
    assert not (tmp_path / "data" / "costctl.db").exists()


def test_nul_byte_in_before_stop_is_refused_at_load_and_never_crashes_a_stop(tmp_path):
    """A NUL byte in the before_stop command crashed the watch with no stop. The config refuses
    it; a hook that reaches the executor anyway (built in code) fails to start, recorded, and
    the stop goes on and is confirmed."""
    with pytest.raises(ConfigError):
        settings_from_toml(tmp_path / "a", '[hooks]\nbefore_stop = "sync\\u0000"\n')
    s = settings_from_toml(tmp_path, '[instance]\ngpu = "RTX 4090"\n[policies.idle]\ntime_window = "30s"\n')
    s = s.model_copy(update={"hooks": HooksConfig.model_construct(before_stop="sync\x00",
                                                                  before_stop_timeout=timedelta(seconds=5))})
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
    code, status = drive(w, clock, step_s=5, max_real_s=60)
    assert status == "stopped" and code == 0
    hook = w.executor.stop.hook
    assert hook["ok"] is False and hook["result"].startswith("failed to start: embedded null byte")
