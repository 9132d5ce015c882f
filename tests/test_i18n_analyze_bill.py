"""``costctl analyze`` and ``costctl bill`` in Simplified Chinese and in English, as the user's
shell chooses (issue 16, part 3): with ``LANG=zh_CN.UTF-8`` the report's sentences, the bill's
headers, statuses and notes are Chinese, money is written as Chinese writes it (``¥1,008.00``,
``US$0.46``: :func:`costctl.i18n.format_money`) and the bill's times are in ``[watch] timezone``
without microseconds; with ``LANG=C`` they are English (``CN¥1,008.00``, ``$0.46``). The bill's
money columns still add up to their footers as shown, in Chinese too (the largest remainder
method). Machine output is the same in both languages: the bill's JSON and CSV byte for byte,
the analysis's figures and keys.

Real ``costctl`` processes on a real log of the corpus and a real SQLite ledger, each with only
the locale variables we set; the readers', the peers', the sampler's and the plot's messages
in-process, in either language."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from costctl import i18n
from costctl.errors import UsageError
from costctl.ledger import Ledger
from costctl.records import Action, Decision

from replay_support import corpus_file

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile("[\u4e00-\u9fff]")
CENT = Decimal("0.01")
ZONE = "Asia/Shanghai"


@pytest.fixture(autouse=True)
def _language_restored(monkeypatch: pytest.MonkeyPatch):
    """Every in-process test chooses its language; the one before it is restored after."""
    for key in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "COSTCTL_UI__LANGUAGE"):
        monkeypatch.delenv(key, raising=False)
    before = i18n.language()
    yield
    i18n.set_language(before)


def costctl(args: list[str], *, lang: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``costctl ARGS`` in a child with ``LANG=lang`` (and no other locale or COSTCTL_ variable
    but its own data dir, an empty config and ``[watch] timezone = Asia/Shanghai``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COSTCTL_", "LC_", "LANG"))}
    (tmp_path / "empty.toml").write_text("")
    env.update({"LANG": lang, "COSTCTL_DATA_DIR": str(tmp_path / "data"), "COSTCTL_CONFIG": str(tmp_path / "empty.toml"),
                "COSTCTL_WATCH__TIMEZONE": ZONE, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    return subprocess.run([sys.executable, "-m", "costctl", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)


def joined(text: str) -> str:
    """``text`` without any whitespace (rich wraps long lines where it likes)."""
    return "".join(text.split())


# ----------------------------------------------------------------------------- analyze

FORGOTTEN = ["--price", "2.5", "--currency", "CNY", "--compare"]


def test_analyze_speaks_chinese_with_yuan_under_a_chinese_locale(tmp_path) -> None:
    log = str(corpus_file("gpu_query_forgotten_idle.csv"))
    r = costctl(["analyze", "--gpu-log", log, *FORGOTTEN], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    text = joined(r.stdout)
    for sentence in ("价格：每实例¥2.50/小时；日志期间花费：¥17.06",
                     "空闲时段（整机：所有GPU空闲，costctl的规则）",
                     "事后最优（完全事后视角）：在2026-02-0202:33:37.502停止（最后一个空闲时段），节省¥13.48",
                     "costctl：在2026-02-0203:03:37.575停止，节省¥12.23（比事后最优少¥1.25）",
                     # the peers, replayed one sample at a time (costctl.replay.streaming): rule; reason
                     "任一GPU最近60分钟的全部采样都低于10%时终止（dstackutilization_policy）；GPU0：自",
                     "假设：GPU日志不记录任务：只要任一GPU>=5%，就视为有任务在运行",
                     "注：价格来源：--price"):
        assert sentence in text, sentence
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    assert any("03:03:37.575" in row and "idle" in row and "关停" in row and "¥12.23" in row for row in rows)
    for english in ("CN¥", "final idle stretch", "price from", "no job running", "terminate when", "saving"):
        assert english not in r.stdout, english


def test_analyze_speaks_english_under_lang_c(tmp_path) -> None:
    log = str(corpus_file("gpu_query_forgotten_idle.csv"))
    r = costctl(["analyze", "--gpu-log", log, *FORGOTTEN], lang="C", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for sentence in ("price: CN¥2.50/h per instance; spend over the log: CN¥17.06",
                     "oracle (perfect hindsight): stop at 2026-02-02 02:33:37.502 (final idle stretch), saving "
                     "CN¥13.48",
                     "costctl: stop at 2026-02-02 03:03:37.575, saving CN¥12.23 (CN¥1.25 less than the oracle)",
                     "terminate when any GPU has all samples of the last 60 min below 10 % (dstack "
                     "utilization_policy); GPU 0: all 240 samples since",
                     "note: price from --price"):
        assert sentence in text, sentence
    assert not CJK.search(r.stdout + r.stderr)


def test_analyze_json_keeps_its_machine_values_in_chinese(tmp_path) -> None:
    log = str(corpus_file("gpu_query_forgotten_idle.csv"))
    r = costctl(["analyze", "--gpu-log", log, *FORGOTTEN, "--format", "json"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["oracle"]["reason"] == "final idle stretch"  # said in Chinese by the table only
    assert d["oracle"]["saving"] == {"amount": "13.48", "exact": d["oracle"]["saving"]["exact"], "currency": "CNY"}
    [stop] = [x for x in d["decisions"] if x["action"] == "stop"]
    assert stop["policy"] == "idle" and stop["saving"]["amount"] == "12.23" and stop["saving"]["currency"] == "CNY"
    assert d["idle_stretches"][-1]["start"] == "2026-02-02T02:33:37.502000Z"


def test_a_training_log_placed_in_time_is_said_in_chinese(tmp_path) -> None:
    log = str(corpus_file("hf_trainer_state_t5_plateau.json"))
    args = ["analyze", "--train-log", log, "--start-time", "2026-01-01T00:00:00", "--step-rate", "2"]
    r = costctl(args, lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    text = joined(r.stdout)
    assert "已按--start-time和--step-rate放到时间轴上" in text
    assert "训练：首个1.9963，最后1.7423，最小1.734（步181000）" in text
    assert "假设：假定任务从第一个到最后一个记录下来的进度点一直在运行" in text
    assert "事后最优（完全事后视角）：不停止（日志结束时仍在忙：无需关停）" in text
    assert "start+rate" not in r.stdout and "the job is taken" not in r.stdout
    d = json.loads(costctl([*args, "--format", "json"], lang="zh_CN.UTF-8", tmp_path=tmp_path).stdout)
    assert d["train_log"]["placed_on_time_axis"] == "start+rate"  # the JSON keeps the machine value


def test_the_readers_errors_are_one_chinese_line_naming_the_file(tmp_path) -> None:
    from costctl.replay.readers import open_gpu_log, read_train_log
    from costctl.replay.textio import open_text

    train = corpus_file("hf_trainer_state_t5_plateau.json")
    bad = tmp_path / "gpu.csv"
    bad.write_text("timestamp, index, utilization.gpu [%]\n2026/01/01 00:00:00, 0\n2026/01/01 00:00:01, 0\n")
    gpu = corpus_file("gpu_query_forgotten_idle.csv")
    said = {}
    for language in ("zh_CN", "en"):
        i18n.set_language(language)
        for name, call in (("train", lambda: open_gpu_log(train)), ("bad", lambda: open_gpu_log(bad)),
                           ("gpu", lambda: read_train_log(gpu)), ("missing", lambda: open_text(tmp_path / "no.csv"))):
            with pytest.raises(UsageError) as info:
                call()
            said[(language, name)] = info.value.message
    for (language, name), message in said.items():
        assert "\n" not in message and bool(CJK.search(message)) is (language == "zh_CN"), message
    assert said[("zh_CN", "train")].startswith(f"{train}：看起来是训练日志（hf-trainer-state），不是 GPU 日志；请用 "
                                                "--train-log 传入")
    assert said[("zh_CN", "bad")] == (f"{bad}：读不出任何 GPU 采样（nvidia-smi-csv，2 条记录无法读取；第一条：第 2 行："
                                      "3 列却有 2 个值）")
    assert said[("en", "bad")] == (f"{bad}: no GPU sample could be read (nvidia-smi-csv, 2 unreadable records; the "
                                   "first: line 2: 2 values for 3 columns)")
    assert said[("zh_CN", "gpu")].startswith(f"{gpu}：看起来是 GPU 日志（nvidia-smi-csv），不是训练日志")
    assert said[("zh_CN", "missing")] == f"{tmp_path / 'no.csv'}：文件不存在"


def test_the_peers_replayed_one_sample_at_a_time_say_what_the_batch_replay_says() -> None:
    """costctl.replay.streaming (what analyze runs) and costctl.replay.peers word the peers'
    rules, reasons and assumptions the same, in either language."""
    from costctl.records import GpuReading, SignalStatus, TelemetrySample
    from costctl.replay.peers import DSTACK_MINIMUM_WINDOW, dstack_utilization_policy, skypilot_autostop
    from costctl.replay.streaming import DstackStream, SkypilotStream

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    samples = [TelemetrySample(time=start + timedelta(minutes=m), gpus=(GpuReading(index=0, utilization=0.0),),
                               gpu_status=SignalStatus.OK) for m in range(0, 12)]
    for language in ("en", "zh_CN"):
        i18n.set_language(language)
        sky = SkypilotStream(idle_minutes=5, min_gpu_utilization=10, job_span=None)
        dstack = DstackStream(DSTACK_MINIMUM_WINDOW)
        for s in samples:
            sky.add(s)
            dstack.add(s)
        batch_sky = skypilot_autostop(samples, min_gpu_utilization=10)
        batch_dstack = dstack_utilization_policy(samples, min_gpu_utilization=10, time_window=timedelta(minutes=5),
                                                 setting=DSTACK_MINIMUM_WINDOW)
        for streamed, batch in ((sky.result(), batch_sky), (dstack.result(), batch_dstack)):
            assert (streamed.rule, streamed.reason, streamed.assumption, streamed.stop_time) == (
                batch.rule, batch.reason, batch.assumption, batch.stop_time)
        if language == "zh_CN":
            assert sky.result().reason == "自 2026-01-01T00:00:00Z 起没有运行中的任务也没有 SSH 会话（5 分钟）"
            assert dstack.result().rule.startswith("任一 GPU 最近 5 分钟的全部采样都低于 10 % 时终止")
        else:
            assert sky.result().reason == "no job running and no SSH session since 2026-01-01T00:00:00Z (5 min)"


def test_the_no_gpu_notice_is_said_in_the_language(tmp_path) -> None:
    from costctl.i18n import N_
    from costctl.telemetry.sampler import detect_gpu_source
    from telemetry_fakes import NVML_CODES, FakeNvml

    for language, stand_in, want in (
            ("zh_CN", N_("all user processes"), "未找到 NVIDIA GPU：改用所有用户进程的 CPU 利用率代替 GPU 利用率"),
            ("en", N_("the watched process tree"),
             "no NVIDIA GPU found: using the CPU utilization of the watched process tree in place of GPU utilization")):
        i18n.set_language(language)
        lines: list[str] = []
        assert detect_gpu_source(log=lines.append, stand_in=stand_in,
                                 nvml_module=FakeNvml(init_error=NVML_CODES["NVML_ERROR_LIBRARY_NOT_FOUND"]),
                                 smi_binary=str(tmp_path / "nvidia-smi-missing")) is None
        assert lines == [want]


# ----------------------------------------------------------------------------- bill

T0 = datetime(2026, 3, 1, 14, 0, tzinfo=timezone.utc)  # 22:00 in Asia/Shanghai
CNY_RATE = Decimal("3.6")  # 0.001 yuan a second
USD_RATE = Decimal("0.45")


def build(url: str) -> dict[str, str]:
    """An AutoDL instance in CNY: three runs of 1005 s (1.005 yuan each: shown 1.01, 1.01 and
    1.00 so that they add up to the 3.015 rounded), then a 280-hour run (1,008 yuan) whose idle
    stop was confirmed (an hour of waste, a saving); a RunPod spot instance in USD: a dry run of
    3661 s (0.457625 dollars)."""
    with Ledger.open(url) as ledger:
        autodl = ledger.ensure_instance("autodl", "u-4090", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                        price_per_hour=CNY_RATE, currency="CNY")
        runpod = ledger.ensure_instance("runpod", "pod-1", gpu="A100", gpu_count=1, billing="spot",
                                        price_per_hour=USD_RATE, currency="USD")
        runs = {}

        def run(name: str, pk: int, start: datetime, seconds: int, rate: Decimal, currency: str, **kw) -> str:
            rid = ledger.start_run(pk, started_at=start, command=None, log_path=None, host="h", **kw)
            end = start + timedelta(seconds=seconds)
            ledger.accrue(rid, end, rate, currency)
            ledger.finish_run(rid, ended_at=end, exit_code=0, status="completed")
            runs[name] = rid
            return rid

        for k in range(3):
            run(f"small{k}", autodl, T0 + timedelta(hours=k), 1005, CNY_RATE, "CNY")
        big_start = T0 + timedelta(hours=4)
        end = big_start + timedelta(hours=280)
        big = run("big", autodl, big_start, 280 * 3600, CNY_RATE, "CNY")
        decision = Decision(time=end - timedelta(minutes=1), policy="idle", action=Action.STOP, reason="idle stop",
                            evidence={"idle_since": (end - timedelta(hours=1)).isoformat().replace("+00:00", "Z")})
        did = ledger.record_decision(big, decision, outcome="stop requested")
        for attempt, (t, state) in enumerate(((end - timedelta(minutes=1), "requested"), (end, "confirmed"))):
            ledger.record_stop_event(big, decision_id=did, time=t, state=state, attempt=max(1, attempt))
        run("dry", runpod, T0 + timedelta(hours=1), 3661, USD_RATE, "USD", mode="dry-run")
    return runs


@pytest.fixture
def ledger_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    build(url)
    return url


def parse_tables(out: str) -> list[dict]:
    """Each table of a piped rich table output: its headers, body rows and footer lines (cells)."""
    tables, current, part = [], None, None
    for line in out.splitlines():
        if line.startswith("┏"):
            current, part = {"headers": [], "body": [], "footer": []}, "body"
            tables.append(current)
        elif current is None:
            continue
        elif line.startswith("┃"):
            current["headers"] = [c.strip() for c in line.strip()[1:-1].split("┃")]
        elif line.startswith("├"):
            part = "footer"
        elif line.startswith("└"):
            current = None
        elif line.startswith("│"):
            current[part].append([c.strip() for c in line.strip()[1:-1].split("│")])
    return tables


#: How each language writes the ledger's currencies (costctl.i18n.format_money): symbol -> code.
SYMBOLS = {"zh_CN": {"US$": "USD", "¥": "CNY"}, "en": {"$": "USD", "CN¥": "CNY"}}


def money(cell: str, language: str) -> tuple[Decimal, str | None]:
    """``(amount, currency)`` of a money cell as shown; ``-`` is nothing."""
    if cell in ("-", ""):
        return Decimal(0), None
    for symbol, code in SYMBOLS[language].items():
        if cell.startswith(symbol):
            return Decimal(cell[len(symbol):].replace(",", "")), code
    raise AssertionError(f"not a money cell in {language}: {cell!r}")


def footers_adding_up(table: dict, language: str, headers: tuple[str, ...]) -> dict[str, dict[str, Decimal]]:
    """Assert each money column's cells add up, per currency, to its footer as shown; return the footers."""
    h = table["headers"]
    spend_at = h.index(headers[-1])
    currencies = [money(line[spend_at], language)[1] for line in table["footer"]]
    out: dict[str, dict[str, Decimal]] = {}
    for header in headers:
        at = h.index(header)
        sums: dict[str, Decimal] = {}
        for row in table["body"]:
            value, own = money(row[at], language)
            currency = money(row[spend_at], language)[1]
            assert own in (None, currency) and value == value.quantize(CENT), row
            sums[currency] = sums.get(currency, Decimal(0)) + value
        out[header] = {}
        for line, currency in zip(table["footer"], currencies):
            value, _own = money(line[at], language)
            assert sums.get(currency, Decimal(0)) == value, (header, currency, sums, value)
            out[header][currency] = value
    return out


ZH_HEADERS = ["运行", "实例", "GPU", "开始时间", "时长", "状态", "单价/小时", "浪费", "节省", "花费"]
EN_HEADERS = ["RUN", "INSTANCE", "GPU", "STARTED", "DURATION", "STATUS", "PRICE/h", "WASTE", "SAVED", "SPEND"]


def test_the_bill_is_chinese_with_yuan_and_adds_up_as_shown_under_a_chinese_locale(tmp_path, ledger_url) -> None:
    r = costctl(["bill", "--db", ledger_url], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"按运行统计的花费（{ZONE}）")
    [table] = parse_tables(out)
    assert table["headers"] == ZH_HEADERS
    rows = {row[0]: row for row in table["body"]}
    assert len(rows) == 5 and table["footer"][0][0] == "合计"
    small = [row for row in table["body"] if row[4] == "0:16:45"]
    # 1.005 yuan three times: 1.01, 1.01, 1.00 (the largest remainder), not 1.00 three times
    assert sorted(row[-1] for row in small) == ["¥1.00", "¥1.01", "¥1.01"]
    assert {row[3] for row in small} == {"2026-03-01 22:00:00+08:00", "2026-03-01 23:00:00+08:00",
                                         "2026-03-02 00:00:00+08:00"}  # [watch] timezone, to the second
    big = next(row for row in table["body"] if row[4] == "280:00:00")
    assert big[-1] == "¥1,008.00" and big[6] == "¥3.60" and big[7] == "¥3.60" and big[5] == "已完成（0）"
    dry = next(row for row in table["body"] if "runpod" in row[1])
    assert dry[5] == "已完成（0），演练" and dry[6] == "US$0.45（竞价）" and dry[-1] == "US$0.46"
    footers = footers_adding_up(table, "zh_CN", ("浪费", "节省", "花费"))
    assert footers["花费"] == {"CNY": Decimal("1011.02"), "USD": Decimal("0.46")}
    doc = json.loads(costctl(["bill", "--db", ledger_url, "--format", "json"], lang="C", tmp_path=tmp_path).stdout)
    for header, key in (("花费", "totals"), ("浪费", "waste_totals"), ("节省", "saved_totals")):
        for currency, shown in footers[header].items():
            exact = Decimal(doc[key].get(currency, "0"))
            assert shown == exact.quantize(CENT, rounding=ROUND_HALF_EVEN), (header, currency)
    said = joined(out)
    assert "节省：已确认的关停所避免的花费" in said and "运行满24h" in said
    for english in ("Spend by", "RUN", "SPEND", "TOTAL", "completed", "dry run", "CN¥", "Saved:"):
        assert english not in out, english


def test_the_bill_is_english_under_lang_c(tmp_path, ledger_url) -> None:
    r = costctl(["bill", "--db", ledger_url], lang="C", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Spend by run ({ZONE})")
    [table] = parse_tables(r.stdout)
    assert table["headers"] == EN_HEADERS and table["footer"][0][0] == "TOTAL"
    dry = next(row for row in table["body"] if "runpod" in row[1])
    assert dry[5] == "completed (0), dry run" and dry[6] == "$0.45 spot" and dry[-1] == "$0.46"
    assert footers_adding_up(table, "en", ("WASTE", "SAVED", "SPEND"))["SPEND"] == {
        "CNY": Decimal("1011.02"), "USD": Decimal("0.46")}
    assert "Saved: what a confirmed stop avoided" in " ".join(r.stdout.split())
    assert not CJK.search(r.stdout + r.stderr)


def test_limit_and_grouping_notes_are_chinese_and_still_add_up(tmp_path, ledger_url) -> None:
    r = costctl(["bill", "--db", ledger_url, "--limit", "2"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 次更早的运行未显示（--limit 2）；合计已包含它们" in r.stdout
    [table] = parse_tables(r.stdout)
    assert any(row[0] == "3 次更早的运行" for row in table["body"])
    assert footers_adding_up(table, "zh_CN", ("浪费", "节省", "花费"))["花费"]["CNY"] == Decimal("1011.02")
    r = costctl(["bill", "--db", ledger_url, "--by", "instance", "--since", "2026-03-01"], lang="zh_CN.UTF-8",
                tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"按实例统计的花费，从 2026-03-01 00:00:00+08:00 到现在（{ZONE}）")
    [table] = parse_tables(r.stdout)
    assert table["headers"] == ["实例", "GPU", "计费", "运行数", "首次计费", "末次计费", "计费时长", "单价/小时", "浪费",
                                "节省", "花费"]
    assert any("竞价" in row for row in table["body"]) and any("按需" in row for row in table["body"])
    footers_adding_up(table, "zh_CN", ("浪费", "节省", "花费"))


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_the_bill_s_json_and_csv_are_the_same_in_either_language(tmp_path, ledger_url, fmt) -> None:
    said = {lang: costctl(["bill", "--db", ledger_url, "--format", fmt], lang=lang, tmp_path=tmp_path)
            for lang in ("zh_CN.UTF-8", "C")}
    assert all(r.returncode == 0 for r in said.values())
    zh, en = said["zh_CN.UTF-8"].stdout, said["C"].stdout
    if fmt == "json":  # the present the savings were counted at differs between the two runs
        zh_doc, en_doc = json.loads(zh), json.loads(en)
        for doc in (zh_doc, en_doc):
            doc["saved_counterfactual"].pop("as_of")
        assert zh_doc == en_doc and zh_doc["totals"] == {"CNY": "1011.015000", "USD": "0.457625"}
        assert zh_doc["saved_counterfactual"]["text"].startswith("Saved: what a confirmed stop avoided")
    else:
        assert zh == en and zh.startswith("run_id,")
    assert not CJK.search(zh)


def test_bill_and_analyze_help_are_chinese(tmp_path) -> None:
    for command, phrases in (("bill", ("显示已记录的花费、浪费和节省", "只统计自此日期/时间起的花费（含）")),
                             ("analyze", ("在记录下来的日志上重放已配置的策略", "列出至少这么长的空闲时段"))):
        r = costctl([command, "--help"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        text = joined(r.stdout)
        assert all(joined(p) in text for p in phrases), (command, r.stdout)


def test_bill_usage_errors_are_one_chinese_line(tmp_path, ledger_url) -> None:
    for args, phrase in ((["--since", "tomorrow"], "--since 'tomorrow'：应为日期（2026-01-31）或 ISO-8601 日期时间"),
                         (["--run", "zz", "--plot", str(tmp_path / "s.png")], "--run 'zz'：应为运行 ID 或其开头几个字符"),
                         (["--expand"], "--expand 需与 --by chain 一起使用")):
        r = costctl(["bill", "--db", ledger_url, *args], lang="zh_CN.UTF-8", tmp_path=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and phrase in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- the table's cells, the plot

def test_money_cells_follow_the_language() -> None:
    from costctl.report import money_cell, price_range_cell, status_text

    i18n.set_language("zh_CN")
    assert money_cell(Decimal("1234.565"), "CNY") == "¥1,234.56" and money_cell(Decimal("0.004"), "USD") == "<US$0.01"
    assert price_range_cell(Decimal("0.70"), Decimal("0.80"), "USD") == "US$0.70-0.80"
    assert status_text("completed") == "已完成" and status_text("stop failed") == "关停失败"
    assert status_text("some-new-status") == "some-new-status"
    i18n.set_language("en")
    assert money_cell(Decimal("1234.565"), "CNY") == "CN¥1,234.56" and money_cell(Decimal("0.004"), "USD") == "<$0.01"
    assert price_range_cell(Decimal("0.70"), Decimal("0.80"), "USD") == "$0.70-0.80"
    assert status_text("completed") == "completed"


def test_plot_labels_are_chinese_only_with_a_chinese_font() -> None:
    from costctl.replay.plot import figure_text

    i18n.set_language("zh_CN")
    text, rc = figure_text(lambda: {"DejaVu Sans", "WenQuanYi Micro Hei"})
    assert text("spend ({currency})") == "花费（{currency}）"
    assert rc["font.sans-serif"][0] == "WenQuanYi Micro Hei"
    text, rc = figure_text(lambda: {"DejaVu Sans"})  # no CJK glyphs: English, drawable
    assert text("spend ({currency})") == "spend ({currency})" and rc == {}
    i18n.set_language("en")
    text, rc = figure_text(lambda: {"Noto Sans CJK SC"})
    assert text("spend ({currency})") == "spend ({currency})" and rc == {}


def test_the_bill_plot_in_chinese_draws_no_missing_glyph(tmp_path, ledger_url, monkeypatch) -> None:
    """Under Chinese, the PNG is drawn with no glyph missing from its font: Chinese labels in a
    CJK font where one is installed, English labels where none is."""
    pytest.importorskip("matplotlib")
    from costctl.cli.main import main
    from costctl.replay.plot import cjk_font, pyplot

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", "zh_CN")  # [ui] language: chosen when the settings load
    png = tmp_path / "spend.png"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["bill", "--db", ledger_url, "--plot", str(png)]) == 0
    missing = [str(w.message) for w in caught if "missing from" in str(w.message)]
    assert not missing, missing[:3]
    assert png.stat().st_size > 10_000
    if cjk_font() is None:  # the check can fail: Chinese drawn in matplotlib's own font loses its glyphs
        plt = pyplot()
        fig, ax = plt.subplots()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ax.set_title("花费")
            fig.savefig(tmp_path / "boxes.png")
        plt.close(fig)
        assert any("missing from" in str(w.message) for w in caught)


def test_the_suite_runs_in_english_whatever_the_shell_says(monkeypatch) -> None:
    """tests/conftest.py: the English assertions of the other tests hold under a Chinese shell."""
    from conftest import _english_messages

    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert i18n.choose_language(None) == "zh_CN"
    _english_messages()
    assert i18n.choose_language(None) == "en" and os.environ["LANG"] == "C.UTF-8" and "LC_ALL" not in os.environ
