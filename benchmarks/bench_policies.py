"""The money, measured: replay the scenario suite through costctl, an oracle and the peers' rules.

Each scenario of ``benchmarks/scenarios/`` (frozen traces and labels; see ``generate.py`` there)
is replayed through

* ``costctl`` — the real :class:`~costctl.policies.PolicyEngine` with every policy at its
  DEFAULTS (no config file, no ``COSTCTL_*`` variable), driven on a simulated clock by
  :func:`costctl.replay.engine.replay_timeline` with the samples a live watch would have read
  (SSH sessions only when ``[policies.idle] count_ssh_sessions`` is on) and the job's own
  start/exit; its stop is the first decision whose action is ``stop``;
* ``oracle`` — perfect hindsight: the scenario's frozen ``oracle_stop_s`` label;
* ``skypilot`` — SkyPilot autostop ``-i 5`` (idle = no running job and no SSH session for 5 min,
  :func:`costctl.replay.peers.skypilot_autostop`);
* ``dstack-1h`` — dstack ``utilization_policy`` with its documented example
  (``min_gpu_utilization=10``, ``time_window=1h``), ANY-GPU rule;
* ``dstack-5m`` — the same threshold with dstack's 5-minute minimum ``time_window``.

Money: the instance bills per second at the scenario's price from its start until the rule's
stop, or until the scenario's end (the user stops it, the provider terminates it) when the rule
does not stop before. A stop before the label ``work_until_s`` is a FALSE STOP. A false stop
saves nothing real: the work still to come has to run again. ``effective_spend`` charges it as
a lower bound: the spend until the stop plus ``price x (work_until - stop)`` (the remaining work
on a restarted instance, nothing lost, no restart overhead). Not replayed:
costctl's lifecycle (checkpoint on a spot notice, OOM retry, downsize): only the policies.

Prints one line per scenario and rule, the totals, and as its LAST LINE one JSON object:

* ``benchmark``: ``"bench_policies"``; ``currency``: ISO 4217 code of every amount;
* ``rules``: rule names in order; ``settings``: rule -> its settings in words;
* ``scenarios``: name -> rule -> ``stop_s`` (seconds after the scenario's start, null = no
  stop), ``spend`` (decimal string, currency units), ``spend_over_oracle`` (ratio, float),
  ``false_stop`` (bool), ``effective_spend`` (decimal string: spend plus a false stop's redo);
* ``total``: rule -> ``spend`` (decimal string, sum over scenarios), ``spend_over_oracle`` (total
  spend / total oracle spend), ``effective_spend`` and ``effective_over_oracle`` (the same with
  false stops charged their redo), ``false_stops`` (count), ``scenarios_with_false_stops`` (names);
* ``costctl_nearest_oracle``: True when costctl has no false stop and its total effective spend
  is nearer the oracle's than every peer rule's.

Usage::

    python benchmarks/bench_policies.py                 # every scenario
    python benchmarks/bench_policies.py --only oom_crash
    python benchmarks/bench_policies.py --config what-if.toml   # costctl with other settings

With ``--config`` the ``costctl`` rule replays that file's settings instead of the defaults (a
what-if; the JSON's ``config`` names the file, null for the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "scenarios"))

from scenario import Scenario, load_all  # noqa: E402

from costctl.config import Settings, load_settings  # noqa: E402
from costctl.replay.engine import replay_timeline  # noqa: E402
from costctl.replay.peers import (  # noqa: E402
    DSTACK_DOCUMENTED_EXAMPLE,
    DSTACK_MINIMUM_WINDOW,
    SKYPILOT_DEFAULT_IDLE_MINUTES,
    dstack_utilization_policy,
    skypilot_autostop,
    skypilot_describe,
)

RULES = ("costctl", "oracle", "skypilot", "dstack-1h", "dstack-5m")
SETTINGS = {
    "costctl": "costctl's policies with their defaults (PolicyEngine on a simulated clock)",  # or --config
    "oracle": "perfect hindsight (the scenario's frozen oracle_stop_s)",
    "skypilot": skypilot_describe(SKYPILOT_DEFAULT_IDLE_MINUTES),
    "dstack-1h": DSTACK_DOCUMENTED_EXAMPLE.describe(),
    "dstack-5m": DSTACK_MINIMUM_WINDOW.describe(),
}


def default_settings(config: Path | None = None) -> Settings:
    """costctl's defaults: no config file (read from an empty directory), no ``COSTCTL_*``;
    or ``config``'s settings (a what-if)."""
    saved = {k: v for k, v in os.environ.items() if k.upper().startswith("COSTCTL_")}
    cwd = os.getcwd()
    path = config.resolve() if config is not None else None
    try:
        for k in saved:
            del os.environ[k]
        with tempfile.TemporaryDirectory() as empty:
            os.chdir(empty)
            return load_settings(path)
    finally:
        os.chdir(cwd)
        os.environ.update(saved)


def costctl_stop(s: Scenario, settings: Settings):  # type: ignore[no-untyped-def]
    """costctl's first ``stop`` decision on the scenario (None: never), and the decision."""
    samples = s.samples(count_ssh=settings.policies.idle.count_ssh_sessions)
    run = replay_timeline(settings, samples, s.progress(), rate=s.rate, sample_interval=s.interval,
                          job=s.job)
    stop = next((d for d in run.decisions if d.action == "stop" and d.time <= s.end), None)
    return (stop.time if stop else None), stop


def stops(s: Scenario, settings: Settings) -> dict[str, Any]:
    """Each rule's stop time on ``s`` (None: no stop before the end)."""
    everything = s.samples(count_ssh=True)
    sky = skypilot_autostop(everything, idle_minutes=SKYPILOT_DEFAULT_IDLE_MINUTES,
                            min_gpu_utilization=settings.policies.idle.min_gpu_utilization,
                            job_span=s.job, job_recorded=True)
    out: dict[str, Any] = {"costctl": costctl_stop(s, settings)[0], "oracle": s.oracle_stop, "skypilot": sky.stop_time}
    for key, setting in (("dstack-1h", DSTACK_DOCUMENTED_EXAMPLE), ("dstack-5m", DSTACK_MINIMUM_WINDOW)):
        out[key] = dstack_utilization_policy(everything, min_gpu_utilization=setting.min_gpu_utilization,
                                             time_window=setting.time_window, setting=setting).stop_time
    return {k: (v if v is not None and v <= s.end else None) for k, v in out.items()}


def _ratio(a: Decimal, b: Decimal) -> float:
    return float(a / b) if b else float("inf")


def _hm(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    m = int(round(seconds)) // 60
    return f"{m // 60}h{m % 60:02d}"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the suite, print the figures; returns the JSON object printed last."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--only", action="append", help="replay only this scenario (repeatable)")
    parser.add_argument("--scenarios", type=Path, default=HERE / "scenarios", help="directory of scenario files")
    parser.add_argument("--config", type=Path, help="replay costctl with this costctl.toml instead of its defaults")
    args = parser.parse_args(argv)
    settings = default_settings(args.config)
    suite = [s for s in load_all(args.scenarios) if not args.only or s.name in args.only]
    currency = suite[0].rate.currency if suite else "USD"
    per: dict[str, dict[str, Any]] = {}
    totals = {r: Decimal(0) for r in RULES}
    effective = {r: Decimal(0) for r in RULES}
    false = {r: [] for r in RULES}  # type: dict[str, list[str]]
    for s in suite:
        if s.rate.currency != currency:
            raise SystemExit(f"{s.name}: prices in {s.rate.currency}, the suite sums {currency}")
        found = stops(s, settings)
        oracle_spend = s.spend_until(s.oracle_stop).amount
        print(f"{s.name}: {s.title} — {s.rate.amount} {currency}/h, {_hm((s.end - s.start).total_seconds())} trace")
        per[s.name] = {}
        for rule in RULES:
            stop = found[rule]
            spend = s.spend_until(stop).amount
            fs = s.false_stop(stop)
            eff = spend + (s.spend_until(s.work_until).amount - spend if fs else Decimal(0))
            totals[rule] += spend
            effective[rule] += eff
            if fs:
                false[rule].append(s.name)
            stop_s = (stop - s.start).total_seconds() if stop is not None else None
            per[s.name][rule] = {"stop_s": stop_s, "spend": str(spend.quantize(Decimal("0.0001"))),
                                 "spend_over_oracle": round(_ratio(spend, oracle_spend), 4), "false_stop": fs,
                                 "effective_spend": str(eff.quantize(Decimal("0.0001")))}
            print(f"  {rule:<10} stops {_hm(stop_s):>6}  spend {spend:>9.2f} {currency}  "
                  f"x{_ratio(spend, oracle_spend):6.2f} oracle" + ("  FALSE STOP" if fs else ""))
    print("total:")
    total: dict[str, Any] = {}
    for rule in RULES:
        ratio = _ratio(totals[rule], totals["oracle"])
        eff_ratio = _ratio(effective[rule], effective["oracle"])
        total[rule] = {"spend": str(totals[rule].quantize(Decimal("0.0001"))), "spend_over_oracle": round(ratio, 4),
                       "effective_spend": str(effective[rule].quantize(Decimal("0.0001"))),
                       "effective_over_oracle": round(eff_ratio, 4),
                       "false_stops": len(false[rule]), "scenarios_with_false_stops": false[rule]}
        print(f"  {rule:<10} spend {totals[rule]:>9.2f} {currency}  x{ratio:6.2f} oracle  "
              f"effective {effective[rule]:>9.2f} (x{eff_ratio:5.2f})  "
              f"false stops {len(false[rule])}" + (f" ({', '.join(false[rule])})" if false[rule] else ""))
    for rule in RULES:
        print(f"  {rule}: {SETTINGS[rule]}")
    gap = {r: abs(effective[r] - effective["oracle"]) for r in RULES}
    nearest = not false["costctl"] and all(gap["costctl"] < gap[r] for r in RULES if r not in ("costctl", "oracle"))
    print(f"costctl: {len(false['costctl'])} false stops; total effective spend "
          + ("nearer the oracle than every peer rule" if nearest else "NOT nearer the oracle than every peer rule"))
    result = {"benchmark": "bench_policies", "config": str(args.config) if args.config else None,
              "currency": currency, "rules": list(RULES), "settings": SETTINGS,
              "scenarios": per, "total": total, "costctl_nearest_oracle": nearest}
    print(json.dumps(result, separators=(",", ":")))
    return result


if __name__ == "__main__":
    main()
