"""Trial fixes for `costctl offers | start | instances` on the simulated provider."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest



from test_cli_instances import env, run  # noqa: E402,F401 - the same isolated CLI fixture


def status(capsys) -> str:
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 0, err
    return json.loads(out)[0]["status"]


def test_offers_for_an_unknown_gpu_is_one_line_and_exit_1(env, capsys):
    code, out, err = run(capsys, "offers", "NoSuchGPU")
    assert code == 1 and out == ""
    assert err == "costctl: no offers for 'NoSuchGPU': not a GPU model costctl knows; `costctl gpus` lists them\n"
    code, out, err = run(capsys, "offers", "NoSuchGPU", "--format", "json")
    assert code == 1 and json.loads(out) == [] and err.count("\n") == 1


def test_offers_for_a_misspelt_gpu_suggests_catalog_names(env, capsys):
    code, out, err = run(capsys, "offers", "RTX 4900")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("costctl: no offers for 'RTX 4900' from sim;") and "RTX 4090" in err


def test_offers_for_a_known_gpu_without_offers_names_the_providers(env, capsys):
    code, out, err = run(capsys, "offers", "T4")
    assert code == 1 and err == "costctl: no offers for 'T4' from sim\n"
    code, _, err = run(capsys, "offers", "4090", "--billing", "spot")
    assert code == 0, err


def test_start_dry_run_changes_nothing(env, capsys):
    code, out, _ = run(capsys, "start", "sim-local", "--dry-run")
    assert code == 0 and out.startswith("dry run: sim-local on sim") and "already running" in out
    assert run(capsys, "stop", "sim-local")[0] == 0
    code, out, _ = run(capsys, "start", "sim-local", "--dry-run")
    assert code == 0 and out.startswith("dry run: would start sim-local") and "nothing changed" in out
    assert status(capsys) == "stopped"
    code, out, _ = run(capsys, "start", "sim-local")
    assert code == 0 and status(capsys) == "running"


def test_instances_json_money_is_rounded_like_bill(env, capsys):
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["price_per_hour"] == "0.69"  # the provider's rate, exactly
    whole, _, places = row["spend"].partition(".")
    assert len(places) == 6, row["spend"]
    exact = Decimal(row["price_per_hour"]) * Decimal(row["running_s"]) / 3600
    assert Decimal(row["spend"]) == exact.quantize(Decimal("0.000001"))
    code, out, _ = run(capsys, "instances", "--format", "csv")
    header, line = out.splitlines()
    spend = line.split(",")[header.split(",").index("spend")]
    assert len(spend.partition(".")[2]) == 6
