"""``costctl fleet`` against the local fake provider servers (real HTTP on 127.0.0.1) for all
three adapters, the simulated provider and a real SQLite ledger: every instance of every
account with its price, status, guard and provider-reported utilization; an unreadable account
listed with its error line; two accounts of one provider both listed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.cli import fleet as fleet_cli
from costctl.clock import SimClock
from costctl.ledger import Ledger
from costctl.paths import default_database_url
from tests.fakes.autodl import PRO, TOKEN as AUTODL_TOKEN, FakeAutoDL  # noqa: F401 - other tests import it here
from tests.fakes.http import Reply
from tests.fakes.runpod import API_KEY as RUNPOD_KEY, FakeRunPod  # noqa: F401 - other tests import it here
from tests.fakes.vastai import API_KEY as VAST_KEY, FakeVast  # noqa: F401 - other tests import it here
from tests.fleet_world import NOW, SECRETS, TEAM_KEY, fakes, isolate, providers_toml, run_cli


@dataclass
class Fleet:
    """The fakes, the data dir and the config of one test."""

    vast: FakeVast
    runpod: FakeRunPod
    autodl: FakeAutoDL
    data: Path
    config: Path

    def ledger(self) -> Ledger:
        return Ledger.open(default_database_url(self.data))

    def write_config(self, *, autodl_timeout: float = 2, **extra_tables: str) -> None:
        """costctl.toml: the sim, the three fakes (no retries), the Vast team account, and
        ``extra_tables`` (``{"fleet": 'guard_lag = "2m"'}``)."""
        text = providers_toml(self.vast, self.runpod, self.autodl, autodl_timeout=autodl_timeout)
        for name, table in extra_tables.items():
            text += f"\n[{name}]\n{table}\n"
        self.config.write_text(text)


@pytest.fixture
def fleet(tmp_path, monkeypatch) -> Iterator[Fleet]:
    """Three fake providers with instances of every kind, two Vast accounts, and the sim."""
    data, work = isolate(tmp_path, monkeypatch)
    monkeypatch.setattr(fleet_cli, "clock", lambda: SimClock(NOW))
    with fakes() as (vast, runpod, autodl):
        vast.add(312, gpu_util=0.0, disk_hour=0.0021)                               # idle by Vast's reading
        vast.add(313, actual="stopped", intended="stopped", disk_hour=0.0035)       # paying for its disk
        vast.add(700, owner=TEAM_KEY, num_gpus=2, dph_total=0.9, gpu_util=87.0)     # the team account's
        runpod.add("pod000000001", gpus=2, gpu_util=[1, 96], cpu_percent=35)
        runpod.add("pod000000002", desired="EXITED", volume_gb=50)
        autodl.add_pro("pro-76419909953e")
        f = Fleet(vast, runpod, autodl, data, work / "costctl.toml")
        f.write_config()
        yield f


def run(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, argv, SECRETS)


def fleet_json(capsys) -> tuple[int, dict, str]:
    code, out, err = run(capsys, "fleet", "--format", "json")
    return code, json.loads(out), err


def by_id(report: dict) -> dict[str, dict]:
    return {r["id"]: r for r in report["instances"]}


def _watch(ledger: Ledger, provider: str, iid: str, *, seen_ago: timedelta, mode: str | None = None,
           currency: str = "USD", rate: str = "0.4215") -> str:
    pk = ledger.ensure_instance(provider, iid, gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                price_per_hour=Decimal(rate), currency=currency)
    run_id = ledger.start_run(pk, started_at=NOW - timedelta(hours=1), command=["python", "train.py"], log_path=None,
                              host="gpu-box", pid=4242, mode=mode)
    ledger.accrue(run_id, NOW - seen_ago, Decimal(rate), currency)
    return run_id


def test_every_instance_of_every_account_with_price_status_guard_and_utilization(fleet, capsys):
    with fleet.ledger() as ledger:
        guarded = _watch(ledger, "vastai", "312", seen_ago=timedelta(seconds=4))
        _watch(ledger, "runpod", "pod000000001", seen_ago=timedelta(seconds=2), mode="advise-only", rate="0.44")
        _watch(ledger, "autodl", "pro-76419909953e", seen_ago=timedelta(minutes=10), currency="CNY", rate="1.88")

    code, report, err = fleet_json(capsys)
    assert code == 0, err
    assert report["as_of"] == "2026-05-01T12:00:00+00:00" and report["guard_lag_s"] == 30.0
    assert [(a["provider"], a["account"], a["ok"], a["instances"]) for a in report["accounts"]] == [
        ("sim", None, True, 1), ("vastai", None, True, 2), ("vastai", "team", True, 1), ("runpod", None, True, 2),
        ("autodl", None, True, 1)]
    rows = by_id(report)
    assert set(rows) == {"sim-local", "312", "313", "700", "pod000000001", "pod000000002", "pro-76419909953e"}

    vast = rows["312"]
    assert (vast["provider"], vast["account"], vast["status"], vast["gpu"], vast["gpu_count"]) == (
        "vastai", None, "running", "RTX 4090", 1)
    assert (vast["price_per_hour"], vast["currency"]) == ("0.4215", "USD")
    assert vast["gpu_utilization"] == 0.0                      # Vast says idle: the evidence, as reported
    assert vast["guarded"] is True and vast["guard"] == {
        "state": "guarded", "run_id": guarded, "heartbeat_age_s": 4.0, "mode": None, "host": "gpu-box"}
    assert vast["ledger_spend"]["USD"] == str((Decimal("0.4215") * (3600 - 4) / 3600).quantize(Decimal("1e-6")))
    assert Decimal(vast["provider_spend"]) > 0 and vast["uptime_s"] > 3 * 365 * 86400  # started in 2022

    stopped = rows["313"]
    assert (stopped["status"], stopped["guarded"], stopped["guard"]["state"]) == ("stopped", False, "unwatched")
    assert stopped["stopped_price_per_hour"] == "0.0035" and stopped["gpu_utilization"] is None

    team = rows["700"]
    assert (team["account"], team["gpu_count"], team["price_per_hour"], team["gpu_utilization"]) == (
        "team", 2, "0.9", 87.0)

    pod = rows["pod000000001"]
    assert (pod["provider"], pod["price_per_hour"], pod["gpu_count"]) == ("runpod", "0.44", 2)
    assert (pod["gpu_utilization"], pod["cpu_utilization"]) == (96.0, 35.0)  # the busiest GPU
    assert (pod["guarded"], pod["guard"]["state"], pod["guard"]["mode"]) == (False, "not-stopping", "advise-only")
    assert pod["uptime_s"] == 3600.0 and pod["provider_spend"] == "0.440000"
    exited = rows["pod000000002"]
    assert exited["status"] == "stopped" and exited["gpu_utilization"] is None
    assert Decimal(exited["stopped_price_per_hour"]) == Decimal(50) * Decimal("0.20") / 730

    autodl = rows["pro-76419909953e"]
    assert (autodl["price_per_hour"], autodl["currency"], autodl["gpu_utilization"]) == ("1.88", "CNY", None)
    assert (autodl["guarded"], autodl["guard"]["state"], autodl["guard"]["heartbeat_age_s"]) == (False, "stale", 600.0)
    assert set(autodl["ledger_spend"]) == {"CNY"}

    sim = rows["sim-local"]
    assert (sim["provider"], sim["price_per_hour"], sim["status"], sim["guarded"]) == ("sim", "0.69", "running", False)
    assert report["ledger_error"] is None and err == ""


def test_an_unreadable_account_is_listed_with_its_error_and_the_rest_still_shown(fleet, capsys):
    fleet.runpod.inject_for("pods", Reply.empty(500))
    code, report, err = fleet_json(capsys)
    assert code == 0  # some accounts were read: the fleet is shown, the failure said
    failed = [a for a in report["accounts"] if not a["ok"]]
    assert [(a["provider"], a["account"], a["instances"]) for a in failed] == [("runpod", None, 0)]
    assert "500" in failed[0]["error"] and "\n" not in failed[0]["error"]
    assert set(by_id(report)) == {"sim-local", "312", "313", "700", "pro-76419909953e"}
    assert "1 of 5 provider accounts could not be read" in err and err.count("\n") == 1


@pytest.mark.parametrize("breakage, says", [
    ("garbage", "malformed JSON"),
    ("no_pods", "without a list of pods"),
    ("graphql", "GraphQL error"),
    ("bad_key", "RUNPOD_API_KEY"),
])
def test_runpod_answers_that_are_no_instance_list(fleet, capsys, monkeypatch, breakage, says):
    if breakage == "garbage":
        fleet.runpod.inject_for("pods", Reply.malformed_json())       # a 200 whose body is no JSON
    elif breakage == "no_pods":
        fleet.runpod.inject_for("pods", Reply.json({"data": {"myself": []}}))  # a lying 200
    elif breakage == "graphql":
        fleet.runpod.inject_graphql_error("pods", "Something went wrong", code="BAD_USER_INPUT")
    else:
        monkeypatch.setenv("RUNPOD_API_KEY", "rp_wrong_key_0000000000")
    code, report, _err = fleet_json(capsys)
    assert code == 0
    runpod = next(a for a in report["accounts"] if a["provider"] == "runpod")
    assert not runpod["ok"] and says in runpod["error"]
    assert "rp_wrong_key" not in json.dumps(report)
    assert not any(r["provider"] == "runpod" for r in report["instances"])


def test_a_timeout_is_an_unreadable_account_not_a_hang(fleet, capsys):
    fleet.write_config(autodl_timeout=0.3)
    fleet.autodl.server.inject_delay("POST", f"{PRO}/list", 1.5)
    code, report, _err = fleet_json(capsys)
    autodl = next(a for a in report["accounts"] if a["provider"] == "autodl")
    assert code == 0 and not autodl["ok"] and "timed out" in autodl["error"]


def test_a_bad_account_table_or_missing_credential_is_that_account_s_error(fleet, capsys, monkeypatch):
    fleet.write_config(**{"providers.runpod.accounts.lab": 'credential_env = "RUNPOD_LAB_KEY"\ntimeout = -1'})
    monkeypatch.delenv("VAST_TEAM_KEY")
    code, report, _err = fleet_json(capsys)
    errors = {(a["provider"], a["account"]): a["error"] for a in report["accounts"] if not a["ok"]}
    assert set(errors) == {("vastai", "team"), ("runpod", "lab")} and code == 0
    assert "VAST_TEAM_KEY" in errors[("vastai", "team")]
    assert "timeout" in errors[("runpod", "lab")]


def test_every_account_failing_is_exit_1_with_the_listing(fleet, capsys, monkeypatch):
    for var in ("VAST_API_KEY", "VAST_TEAM_KEY", "RUNPOD_API_KEY", "AUTODL_TOKEN"):
        monkeypatch.setenv(var, "wrong-key-000")
    fleet.write_config(**{"providers.sim": 'currency = "usd"\ngpus = 2'})  # the sim's table: an unknown key
    code, report, err = fleet_json(capsys)
    assert code == 1
    assert report["instances"] == [] and all(not a["ok"] for a in report["accounts"])
    assert len(report["accounts"]) == 5 and "no provider account could be read (5 failed)" in err


def test_table_shows_rows_guards_unreadable_accounts_and_the_lag(fleet, capsys):
    with fleet.ledger() as ledger:
        _watch(ledger, "vastai", "312", seen_ago=timedelta(seconds=4))
    fleet.runpod.inject_for("pods", Reply.empty(503))
    fleet.write_config(fleet="guard_lag = \"2m\"")
    code, out, err = run(capsys, "fleet")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["PROVIDER", "ACCOUNT", "ID", "GPU", "STATUS"]
    row = next(line for line in lines if " 312 " in line)
    # money as every command writes it: the price, the provider's spend with its thousands separator,
    # the ledger's spend under 1 USD to 4 decimals at most (0.421033 -> $0.421)
    assert "$0.4215" in row and "$12,742.42" in row and " $0.421 " in row and " USD" not in row
    assert "guarded (heartbeat 4s ago)" in row and row.rstrip().endswith("0%")
    assert any(" team " in line and " 700 " in line and line.rstrip().endswith("87%") for line in lines)
    assert any(line.startswith("runpod") and "unreadable" in line for line in lines)
    assert any(line.startswith("runpod: cannot be read: myself failed") and "503" in line for line in lines)
    assert "1 of 5 instances guarded (a watch that stops, heartbeat at most 2m00s old in this ledger); " \
           "read at 2026-05-01 12:00:00+00:00" in out
    assert "1 of 5 provider accounts could not be read" in err


def test_table_in_chinese(fleet, capsys):
    fleet.write_config(ui='language = "zh_CN"')
    code, out, _err = run(capsys, "fleet")
    assert code == 0
    assert "无人看守" in out and "云服务商" in out
    assert "US$" in out and " USD" not in out  # money as Chinese writes it (costctl.i18n.format_amount)


def test_an_unreadable_ledger_leaves_guards_unknown(fleet, capsys, tmp_path):
    fleet.write_config()
    fleet.config.write_text(f'database_url = "sqlite:///{tmp_path / "missing" / "ledger.db"}"\n'
                            + fleet.config.read_text())
    code, report, err = fleet_json(capsys)
    assert code == 0 and "no ledger database" in report["ledger_error"]
    assert {r["guard"]["state"] for r in report["instances"]} == {"unknown"}
    assert "the ledger cannot be read" in err


def test_a_watch_heartbeat_makes_its_instance_guarded_end_to_end(fleet, capsys, tmp_path):
    """The heartbeat the guard reads is the one the watch's own ledger writes move: a run
    recorded through the watch's writer (its per-tick accrual) guards, and stops guarding once
    the run ends."""
    from costctl.ledger.writer import LedgerWriter

    with fleet.ledger() as ledger:
        pk = ledger.ensure_instance("sim", "sim-local", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("0.69"), currency="USD")
        run_id = ledger.start_run(pk, started_at=NOW - timedelta(minutes=5), command=None, log_path=None, host="h")
        writer = LedgerWriter(ledger, say=lambda line: None)
        try:
            for tick in range(1, 4):  # three ticks of a 5 s sample interval, the last one 1 s ago
                writer.accrue(run_id, NOW - timedelta(seconds=16 - 5 * tick), Decimal("0.69"), "USD")
            writer.flush(5)
        finally:
            writer.close()
    code, report, _err = fleet_json(capsys)
    sim = by_id(report)["sim-local"]
    assert (sim["guarded"], sim["guard"]["heartbeat_age_s"]) == (True, 1.0)
    with fleet.ledger() as ledger:
        ledger.finish_run(run_id, ended_at=NOW, exit_code=0, status="finished")
    code, report, _err = fleet_json(capsys)
    assert by_id(report)["sim-local"]["guard"]["state"] == "unwatched"


def test_json_fields_stay_english_whatever_the_language_shown(fleet, capsys, monkeypatch):
    """Machine output is language-independent: an account's error in ``--format json`` is the
    English sentence under a Chinese ``[ui] language`` too, while the line said to people is Chinese."""
    from costctl import i18n

    fleet.runpod.inject_for("pods", Reply.empty(500))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", "zh_CN")
    with i18n.in_language("en"):
        code, report, err = fleet_json(capsys)
    failed = [a for a in report["accounts"] if not a["ok"]]
    assert code == 0 and len(failed) == 1 and "500" in failed[0]["error"]
    said = json.dumps([report["accounts"], report["ledger_error"]], ensure_ascii=False)  # (regions are names)
    assert not re.search("[\u4e00-\u9fff]", said), said
    assert re.search("[\u4e00-\u9fff]", err), err  # people's line in Chinese


def test_a_guard_lag_shorter_than_the_central_ledgers_sync_is_one_line_exit_2(fleet, capsys, tmp_path):
    """Issue: guard_lag = "10s" with sync_interval = "5m" read every guarded instance unguarded."""
    central = f'central_url = "sqlite:///{tmp_path / "central.db"}"\nsync_interval = "5m"'
    fleet.write_config(ledger=central, fleet='guard_lag = "10s"')
    code, out, err = run(capsys, "fleet")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "fleet.guard_lag = '10s': shorter than [ledger] sync_interval (5m) + 20s: in fleet mode a watch's " \
           "heartbeat reaches the central ledger only every sync_interval, so every guarded instance would read " \
           "unguarded; expected at least 320s, or leave guard_lag out" in err
    assert not (tmp_path / "central.db").exists()
    fleet.write_config(ledger=central, fleet='guard_lag = "320s"')
    assert run(capsys, "fleet")[0] == 0
    fleet.write_config(ledger='sync_interval = "5m"', fleet='guard_lag = "10s"')  # no central ledger: its own
    assert run(capsys, "fleet")[0] == 0


def test_every_out_of_range_provider_value_is_said_like_a_negative_price(fleet, capsys):
    """Issue: a Vast price of "NaN" and a gpu_util of 250 were dropped without a note, while a
    negative price got one ("refused, shown as unknown")."""
    fleet.vast.add(901, dph_total="NaN", gpu_util=250)
    fleet.vast.add(902, dph_total=-0.5, gpu_util=-1)    # -1: Vast's "not measured", no note
    code, out, err = run(capsys, "fleet")
    assert code == 0, err
    said = out + err
    assert "costctl: vastai reported a dph_total of 'NaN' for instance 901; expected a finite amount of money; " \
           "refused, shown as unknown" in said
    assert "costctl: vastai reported a gpu_util of 250 for instance 901; expected a utilization from 0 to 100 " \
           "percent (negative: not measured); refused, shown as unknown" in said
    assert "costctl: vastai reported a price of -0.5 USD per hour for instance 902" in said
    assert "instance 902; expected a utilization" not in said and "instance 312; expected" not in said
    row = next(line for line in out.splitlines() if " 901 " in line)
    assert "250" not in row and "NaN" not in row


LIST = "/api/v0/instances/"


def _leaks(text: str) -> list[str]:
    """The pieces of the Vast keys (8 characters or more of their secret tails) ``text`` shows."""
    tails = (VAST_KEY.removeprefix("vast-key-"), TEAM_KEY.removeprefix("vast-team-key-"))
    return [t[:n] for t in tails for n in range(8, len(t) + 1) if t[:n] in text]


def test_a_key_the_cut_of_a_provider_s_answer_falls_inside_is_masked_before_the_cut(fleet, capsys):
    # Vast answers both accounts 400 with a message that echoes the default account's key and
    # the team's; the 120-character cut of the quoted answer falls inside the team key
    before = f"default key {VAST_KEY} refused; "
    body = json.dumps({"success": False, "msg": before + "team key " + TEAM_KEY + " refused too"})
    pad = "x" * (90 - body.index(TEAM_KEY))
    msg = before + pad + "team key " + TEAM_KEY + " refused too"
    start = json.dumps({"success": False, "msg": msg}).index(TEAM_KEY)
    assert start < 117 < start + len(TEAM_KEY)  # the cut: 117 characters and "..."
    for argv in (("fleet",), ("fleet", "--format", "json")):
        fleet.vast.server.inject("GET", LIST, *[Reply.json({"success": False, "msg": msg}, status=400)] * 2)
        code, out, err = run(capsys, *argv)
        assert code == 0 and "answered 400" in out + err
        assert _leaks(out + err) == [], argv


def test_an_account_s_error_never_shows_another_account_s_key(fleet, capsys):
    # a 200 that says it failed: its message is the error as Vast wrote it, uncut; it echoes the
    # default account's key to the team account (and the other way round)
    msg = f"keys {VAST_KEY} and {TEAM_KEY} are not members of the same team"
    fleet.vast.server.inject("GET", LIST, *[Reply.json({"success": False, "msg": msg})] * 2)
    code, report, err = fleet_json(capsys)
    errors = {a["account"]: a["error"] for a in report["accounts"] if a["provider"] == "vastai"}
    assert set(errors) == {None, "team"} and all("are not members of the same team" in e for e in errors.values())
    assert _leaks(json.dumps(report) + err) == []
    fleet.vast.server.inject("GET", LIST, *[Reply.json({"success": False, "msg": msg})] * 2)
    code, out, err = run(capsys, "fleet")
    assert "vastai account team: cannot be read" in out + err and _leaks(out + err) == []
