"""``costctl instances | start | stop | release | offers`` on the simulated provider."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.cli.main import main
from helpers import SHIELD


@pytest.fixture
def env(tmp_path, monkeypatch):
    """An isolated data dir and working directory (no costctl.toml)."""
    data = tmp_path / "data"
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(data))
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key not in ("COSTCTL_DATA_DIR", "COSTCTL_CONFIG"):
            monkeypatch.delenv(key)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def instances_json(capsys) -> list[dict]:
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_instances_json_and_spend(env, capsys):
    rows = instances_json(capsys)
    assert len(rows) == 1
    r = rows[0]
    assert (r["provider"], r["id"], r["gpu"], r["gpu_count"], r["status"], r["billing"], r["price_per_hour"],
            r["currency"]) == ("sim", "sim-local", "RTX 4090", 1, "running", "on-demand", "0.69", "USD")
    # spend so far = price per hour × running time, rounded to 6 places for output (as bill does)
    exact = Decimal(r["price_per_hour"]) * Decimal(r["running_s"]) / 3600
    assert r["spend"] == str(exact.quantize(Decimal("0.000001")))
    assert Decimal(r["running_s"]) >= 0


def test_instances_table(env, capsys):
    code, out, err = run(capsys, "instances")
    assert code == 0, err
    for word in ("PROVIDER", "sim-local", "RTX 4090", "running", "on-demand", "$0.69", "SPEND"):
        assert word in out


def test_config_table_shapes_the_simulated_instance(env, capsys):
    (env / "costctl.toml").write_text('[providers.sim]\ngpu = "A100 80GB"\ngpu_count = 2\ninstance_id = "box"\n')
    r = instances_json(capsys)[0]
    assert (r["id"], r["gpu"], r["gpu_count"], r["price_per_hour"]) == ("box", "A100 80GB", 2, "3.78")


def test_instance_section_seeds_the_simulated_instance(env, capsys):
    (env / "costctl.toml").write_text('[instance]\ngpu = "RTX 3090"\nprice_per_hour = "0.25"\ncurrency = "EUR"\n')
    r = instances_json(capsys)[0]
    assert (r["gpu"], r["price_per_hour"], r["currency"]) == ("RTX 3090", "0.25", "EUR")


def test_bad_provider_config_is_one_line(env, capsys):
    (env / "costctl.toml").write_text("[providers.sim]\ngpus = 2\n")
    code, out, err = run(capsys, "instances", "--provider", "sim")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "unknown key 'gpus'" in err


def test_unknown_provider(env, capsys):
    code, out, err = run(capsys, "stop", "x", "--provider", "nope")
    assert code == 2
    assert err.strip() == "costctl: unknown provider 'nope'; available: " + err.split("available: ")[1].strip()
    assert "sim" in err


def test_stop_dry_run_changes_nothing_then_stop_is_idempotent(env, capsys):
    code, out, _ = run(capsys, "stop", "sim-local", "--dry-run")
    assert code == 0 and "dry run: would stop sim-local" in out and "nothing changed" in out
    assert instances_json(capsys)[0]["status"] == "running"

    code, out, _ = run(capsys, "stop", "sim-local")
    assert code == 0 and out.startswith("stopped sim-local")
    r = instances_json(capsys)[0]
    assert r["status"] == "stopped" and r["stopped_at"]

    code, out, _ = run(capsys, "stop", "sim-local")
    assert code == 0 and "already stopped, nothing done" in out
    assert instances_json(capsys)[0]["stopped_at"] == r["stopped_at"]

    code, out, _ = run(capsys, "stop", "sim-local", "--dry-run")
    assert code == 0 and "already stopped" in out

    code, out, _ = run(capsys, "start", "sim-local")
    assert code == 0 and "running" in out
    assert instances_json(capsys)[0]["status"] == "running"


def test_stop_unknown_instance(env, capsys):
    code, out, err = run(capsys, "stop", "i-nope")
    assert code == 1 and "no instance 'i-nope'" in err and "Traceback" not in err


def test_release_without_yes_and_without_a_terminal_is_refused(env, capsys):
    code, out, err = run(capsys, "release", "sim-local")
    assert code == 2
    assert err.strip() == (
        "costctl: release deletes instance sim-local and its data; pass --yes to confirm "
        "(there is no terminal to ask on)"
    )
    assert instances_json(capsys)[0]["status"] == "running"


def test_release_dry_run_and_yes(env, capsys):
    code, out, _ = run(capsys, "release", "sim-local", "--dry-run")
    assert code == 0 and "would release" in out
    assert instances_json(capsys)[0]["status"] == "running"
    code, out, _ = run(capsys, "release", "sim-local", "--yes")
    assert code == 0 and out.startswith("released sim-local")
    assert instances_json(capsys)[0]["status"] == "terminated"
    code, out, _ = run(capsys, "release", "sim-local", "--yes")
    assert code == 0 and "already released" in out


def test_offers_cheapest_first_within_each_currency(env, capsys):
    code, out, err = run(capsys, "offers", "4090", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["currency"] for r in rows} == {"CNY", "USD"}
    assert all(r["gpu"] == "RTX 4090" for r in rows)
    currencies = [r["currency"] for r in rows]
    assert currencies == sorted(currencies)  # grouped, never mixed
    for cur in ("CNY", "USD"):
        per_gpu = [Decimal(r["price_per_gpu_hour"]) for r in rows if r["currency"] == cur]
        assert per_gpu == sorted(per_gpu)
    for r in rows:
        assert Decimal(r["price_per_gpu_hour"]) * r["gpu_count"] == Decimal(r["price_per_hour"])
    usd = [r for r in rows if r["currency"] == "USD"]
    assert usd[0]["billing"] == "spot" and usd[0]["price_per_gpu_hour"] == "0.35"


def test_offers_sorted_per_instance_hour_with_filters(env, capsys):
    code, out, _ = run(capsys, "offers", "a100", "--sort", "instance-hour", "--billing", "on-demand",
                       "--limit", "2", "-f", "json")
    rows = json.loads(out)
    assert code == 0
    assert [(r["currency"], r["gpu_count"], r["price_per_hour"]) for r in rows] == [
        ("CNY", 1, "5.98"), ("CNY", 2, "11.96"), ("USD", 1, "1.89"), ("USD", 2, "3.78")]


def test_offers_table_and_bad_billing(env, capsys):
    code, out, _ = run(capsys, "offers", "h100")
    assert code == 0 and "H100 80GB" in out and "PER GPU-H" in out and "$2.99" in out and "$23.92" in out
    code, _, err = run(capsys, "offers", "h100", "--billing", "free")
    assert code == 2 and "expected on-demand or spot" in err
    code, out, err = run(capsys, "offers", "voodoo")
    assert code == 1 and out == "" and err.startswith("costctl: no offers for 'voodoo'")


def costctl(env_dir: Path, *argv: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    e["COSTCTL_DATA_DIR"] = str(env_dir.parent / "data")
    return subprocess.run([sys.executable, "-m", "costctl", *argv], cwd=env_dir, env=e, stdin=stdin,
                          capture_output=True, text=True, timeout=120)


def test_successive_cli_processes_see_the_same_simulated_cloud(env):
    stopped = costctl(env, "stop", "sim-local")
    assert stopped.returncode == 0, stopped.stderr
    listing = costctl(env, "instances", "-f", "json")
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)[0]["status"] == "stopped"


def _release_on_a_terminal(env: Path, answer: bytes) -> tuple[int, str]:
    master, slave = pty.openpty()
    e = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    e["COSTCTL_DATA_DIR"] = str(env.parent / "data")
    proc = subprocess.Popen([sys.executable, "-m", "costctl", "release", "sim-local"], cwd=env, env=e,
                            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(slave)
    os.write(master, answer)
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    return proc.returncode, out.decode()


def test_release_asks_on_a_terminal(env, capsys):
    code, out = _release_on_a_terminal(env, b"n\n")
    assert code == 1 and "Release sim-local" in out and "not released" in out
    assert instances_json(capsys)[0]["status"] == "running"
    code, out = _release_on_a_terminal(env, b"y\n")
    assert code == 0 and "released sim-local" in out
    assert instances_json(capsys)[0]["status"] == "terminated"


def test_a_providers_error_names_the_provider_once(env, capsys, tmp_path, monkeypatch):
    """An adapter's message starts with its provider's name; the listing's line names it once
    (``costctl: sim: state file ...``, never ``sim: sim:``)."""
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    state = tmp_path / "data" / "sim" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text("{not json", encoding="utf-8")
    (env / "costctl.toml").write_text("[providers.vastai]\n")
    code, out, err = run(capsys, "instances")
    assert code == 1
    assert "costctl: sim: state file" in err and "sim: sim:" not in err
