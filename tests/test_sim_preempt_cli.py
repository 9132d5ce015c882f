"""``costctl sim preempt``: the user-facing rehearsal of a spot preemption on the simulated
provider (real CLI processes, a real sim state file in tmp_path)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl_providers.sim import SimProvider
from helpers import costctl_env, run_costctl

SPOT = '[instance]\nprovider = "sim"\nbilling = "spot"\n'


def _env(tmp_path: Path, toml: str = SPOT) -> dict[str, str]:
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(toml)
    return costctl_env(tmp_path / "data", COSTCTL_CONFIG=str(cfg))


def _sim(tmp_path: Path) -> SimProvider:
    return SimProvider({}, data_dir=tmp_path / "data")


def test_preempt_issues_a_notice_on_the_only_running_spot_instance(tmp_path):
    env = _env(tmp_path)
    before = datetime.now(timezone.utc)
    proc = run_costctl("sim", "preempt", "--notice", "45s", env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith("preemption notice issued for sim-local") and "(45s from now)" in out
    notice = _sim(tmp_path).preemption_notice("sim-local")
    assert notice is not None and notice.source == "sim"
    assert 44 <= (notice.deadline - before).total_seconds() <= 46 + 30  # 45 s after the command ran
    # default notice 30 s; at once with 0s: the instance is taken (stopped, preempted)
    assert run_costctl("sim", "preempt", env=env).returncode == 0
    assert run_costctl("sim", "preempt", "sim-local", "--notice", "0s", env=env).returncode == 0
    inst = _sim(tmp_path).get_instance("sim-local")
    assert inst.status.value == "stopped" and inst.preempted


@pytest.mark.parametrize("args, toml, code, message", [
    (["nope"], SPOT, 1, "no simulated instance 'nope' (simulated instances: sim-local)"),
    (["i-0abc123"], SPOT, 1, "acts on the simulated provider's instances only"),
    (["--notice", "soon"], SPOT, 2, "--notice 'soon': expected a duration from 0s (at once) to 1h"),
    (["--notice", "2h"], SPOT, 2, "--notice '2h'"),
    ([], '[instance]\nprovider = "sim"\n', 1, "no running spot instance to preempt"),
    (["sim-local"], '[instance]\nprovider = "sim"\n', 1, "only spot instances are preempted"),
])
def test_mistakes_are_one_line_with_a_non_zero_exit(tmp_path, args, toml, code, message):
    proc = run_costctl("sim", "preempt", *args, env=_env(tmp_path, toml))
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_sim_is_in_the_help_and_loads_only_when_named(tmp_path):
    env = _env(tmp_path)
    assert "sim " in run_costctl("--help", env=env).stdout.decode()
    out = run_costctl("sim", "--help", env=env).stdout.decode()
    assert "preempt" in out
    from costctl.cli.main import COMMAND_OWNERS

    assert COMMAND_OWNERS["sim"] == "sim"

