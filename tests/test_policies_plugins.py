"""Policies describe themselves: a policy from outside costctl, found through the
``costctl.policies`` entry-point group, is configured from TOML and the environment, written by
``costctl init``, fires in a real watch, and its decision reaches the ledger, the summary and the
console."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.cli.init import example_config, policies_toml, splice_policies, _template
from costctl.config import Settings, load_settings
from costctl.errors import ConfigError
from costctl.ledger.schema import DecisionRow
from costctl.policies import (
    POLICIES, PolicyContext, PolicyEngine, discover_policies, policies_model, registrations,
)
from costctl.policies import base as policy_base
from costctl.policies import registry as policy_registry
from helpers import REPO, costctl_env, run_costctl

LOUD = '''\
"""A third-party policy: advise when a loss point falls below ``threshold``."""

from pydantic import Field

from costctl.policies import Policy, PolicyConfig, register
from costctl.records import Decision


class LoudConfig(PolicyConfig):
    """``[policies.loud]``: advise when a train loss falls below ``threshold``."""

    action: str = Field(default="advise", description="what to do: advise | stop")
    threshold: float = Field(default=0.1, ge=0, le=10, description="a loss below this fires")


@register
class LoudPolicy(Policy):
    name = "loud"
    config_model = LoudConfig

    def __init__(self, config):
        self.config = config
        self._seen = 0

    def decisions(self, history, now):
        points, missed = history.new_progress(self._seen)
        found = []
        for point in points:
            index = self._seen + missed
            self._seen = index + 1
            missed = 0
            if point.finite and point.value < self.config.threshold:
                found.append(Decision(time=now, policy=self.name, action=self.config.action,
                                      reason=f"loud: loss {point.value:g} fell below {self.config.threshold:g}",
                                      evidence={"value": point.value, "index": index}, key=f"loud:{index}"))
        return found
'''


def make_plugin(root: Path, *, module_text: str = LOUD, target: str = "mypolicies.loud:LoudPolicy",
                name: str = "loud") -> Path:
    """A plugin distribution installed the way pip lays one out: the package plus a
    ``*.dist-info`` with METADATA and entry_points.txt, in ``root`` (to put on sys.path)."""
    pkg = root / "mypolicies"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loud.py").write_text(module_text)
    info = root / "mypolicies_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypolicies-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[costctl.policies]\n{name} = {target}\n")
    return root


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def forget_plugin(saved_policies: dict, saved_specs: dict) -> None:
    """Restore the policy registry to ``saved_*`` and forget the plugin's modules."""
    POLICIES.clear()
    POLICIES.update(saved_policies)
    policy_base._SPECS.clear()
    policy_base._SPECS.update(saved_specs)
    for mod in [m for m in sys.modules if m == "mypolicies" or m.startswith("mypolicies.")]:
        del sys.modules[mod]
    policy_registry._plugins_loaded = False


@pytest.fixture
def plugin_path(monkeypatch, tmp_path, clean_env):
    """Put a fresh plugin on sys.path; afterwards forget it (registry, modules, entry points)."""
    saved_policies, saved_specs = dict(POLICIES), dict(policy_base._SPECS)
    root = make_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    yield root
    forget_plugin(saved_policies, saved_specs)


def test_a_plugin_registers_through_the_entry_point_and_is_configured(plugin_path, tmp_path, monkeypatch):
    specs = discover_policies(refresh=True)
    names = [s.name for s in specs]
    assert names == ["idle", "idle_fraction", "stall", "budget", "plateau", "not_learning", "overfitting", "unstable", "divergence", "loud"]  # order: built-ins, then plugins
    loud = specs[-1]
    assert loud.cls.__module__ == "mypolicies.loud" and loud.config.__name__ == "LoudConfig"
    assert set(policies_model().model_fields) == set(names)

    cfg = tmp_path / "costctl.toml"
    cfg.write_text("[policies.loud]\nthreshold = 0.5\n")
    s = load_settings(cfg)
    assert isinstance(s, Settings)
    assert s.policies.loud.threshold == 0.5 and s.policies.idle.action == "stop"
    assert "loud" in PolicyEngine(s).names

    monkeypatch.setenv("COSTCTL_POLICIES__LOUD__THRESHOLD", "0.25")
    assert load_settings(cfg).policies.loud.threshold == 0.25  # environment wins over the file
    monkeypatch.setenv("COSTCTL_POLICIES__LOUD__THRESHOLD", "99")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    # the value came from the environment: the line names the variable, not the file, and the range
    assert info.value.message == "environment variable COSTCTL_POLICIES__LOUD__THRESHOLD = '99': expected a number from 0 to 10"
    monkeypatch.delenv("COSTCTL_POLICIES__LOUD__THRESHOLD")

    cfg.write_text("[policies.lowd]\nthreshold = 0.5\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert "unknown policy [policies.lowd]; known: idle, idle_fraction, stall, budget, plateau, not_learning, overfitting, unstable, divergence, loud" in info.value.message

    # costctl init writes the plugin's table from its model
    text = example_config()
    assert "[policies.loud]" in text
    assert re.search(r"^threshold = 0\.1 +# a loss below this fires \(0 to 10\)$", text, re.M)
    cfg.write_text(text)
    assert load_settings(cfg).policies.loud.threshold == 0.1


def test_engine_builds_policies_from_their_sections_without_settings(plugin_path):
    discover_policies(refresh=True)
    sections = policies_model()(loud={"threshold": 2}, budget={"total": "5"})
    engine = PolicyEngine(policies=sections, context=PolicyContext(currency="CNY"))
    assert engine.names == ["idle", "idle_fraction", "stall", "budget", "plateau", "not_learning", "overfitting", "unstable", "divergence", "loud"]
    budget = next(p for p in engine.policies if p.name == "budget")
    assert budget.currency == "CNY"


@pytest.mark.parametrize("module_text, target, name, expect", [
    ("raise RuntimeError('boom\\nsecond line')\n", "mypolicies.loud:LoudPolicy", "loud",
     "policy plugin 'loud = mypolicies.loud:LoudPolicy' (entry point group costctl.policies) cannot be "
     "loaded: RuntimeError: boom second line"),
    ("X = 1\n", "mypolicies.loud:X", "loud", "does not name a costctl.policies.Policy subclass"),
    (LOUD, "mypolicies.loud:LoudPolicy", "other", "names a policy called 'loud'"),
    (LOUD.replace('name = "loud"', 'name = "idle"'), "mypolicies.loud:LoudPolicy", "idle",
     "a policy named 'idle' is already registered"),
])
def test_a_broken_plugin_is_one_line_naming_the_entry_point(monkeypatch, tmp_path, clean_env, module_text,
                                                             target, name, expect):
    saved_policies, saved_specs = dict(POLICIES), dict(policy_base._SPECS)
    monkeypatch.syspath_prepend(str(make_plugin(tmp_path / "site", module_text=module_text, target=target,
                                                name=name)))
    policy_registry._plugins_loaded = False
    try:
        with pytest.raises(ConfigError) as info:
            load_settings()
        assert expect in info.value.message and "\n" not in info.value.message
    finally:
        forget_plugin(saved_policies, saved_specs)


def test_the_shipped_example_holds_the_generated_policy_tables():
    # the checked-in file is what init writes when only the built-ins are registered
    builtins = [s for s in registrations() if s.cls.__module__.startswith("costctl.")]
    assert splice_policies(_template(), policies_toml(builtins)) == _template()


def test_every_builtin_policy_field_is_described():
    for spec in registrations():
        if spec.cls.__module__.startswith("costctl."):
            for key, field in spec.config.model_fields.items():
                assert field.description, f"[policies.{spec.name}] {key} has no description"


def test_a_plugin_policy_fires_in_a_watch_and_reaches_ledger_summary_and_console(tmp_path):
    site = make_plugin(tmp_path / "site")
    work = tmp_path / "work"
    work.mkdir()
    (work / "costctl.toml").write_text("[policies.loud]\nthreshold = 0.5\n")
    (work / "job.py").write_text(textwrap.dedent("""\
        import time
        for i, loss in enumerate([2.0, 1.0, 0.3]):
            print(f"step {i} loss: {loss}", flush=True)
            time.sleep(0.3)
    """))
    data = tmp_path / "data"
    env = costctl_env(data, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    proc = run_costctl("watch", "--on-exit", "leave", "--", sys.executable, "job.py", env=env, cwd=work)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    live, summary = err[:err.index("loss first / best / last")], err[err.index("loss first / best / last"):]
    assert live.count("costctl loud advice: loud: loss 0.3 fell below 0.5") == 1  # the console, once
    assert summary.count("decision loud") == 1 and "advise: loud: loss 0.3 fell below 0.5" in " ".join(summary.split())
    with Session(create_engine(f"sqlite:///{data / 'costctl.db'}")) as s:
        rows = s.scalars(select(DecisionRow).where(DecisionRow.policy == "loud")).all()
    assert [(r.action, r.outcome, r.key) for r in rows] == [("advise", "advised", "loud:2")]
    assert rows[0].evidence == {"value": 0.3, "index": 2}
    assert "step 2 loss: 0.3" in out  # the job's own output passes through untouched
    bill = run_costctl("bill", "--format", "json", env=env, cwd=work)
    assert bill.returncode == 0 and json.loads(bill.stdout)["rows"], bill.stderr
