"""Messages of the price table, `costctl gpus` / `recommend`, the provider retry rule, the
capabilities and storage declarations, the AutoDL adapter and the `costctl init` presets in
Simplified Chinese (issue 16 part 3): whole sentences from the catalogue with their values filled
in, the English unchanged, plurals by count."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costctl import i18n

ROOT = Path(__file__).resolve().parent.parent
#: Any Latin word of three letters or more: what an untranslated English fragment leaves behind.
ENGLISH_WORD = re.compile(r"\b[a-z]{3,}\b")


@pytest.fixture(autouse=True)
def _language_restored(monkeypatch: pytest.MonkeyPatch):
    """Every test chooses its language; the one before it is restored after."""
    for key in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "COSTCTL_UI__LANGUAGE"):
        monkeypatch.delenv(key, raising=False)
    before = i18n.language()
    yield
    i18n.set_language(before)


# ----------------------------------------------------------------------------- provider retries


def _fail(count: int, *, idempotent: bool = True):
    """The error :func:`call_with_retries` raises after ``count`` failed attempts (sleeps recorded)."""
    from costctl_providers._retry import RetryPolicy, call_with_retries
    from costctl_providers.errors import ProviderUnavailableError

    def attempt():
        raise ProviderUnavailableError("autodl: server error 500 on POST /power_off")

    with pytest.raises(ProviderUnavailableError) as info:
        call_with_retries(attempt, provider="autodl", operation="power_off", idempotent=idempotent,
                          policy=RetryPolicy(attempts=count, backoff_s=0), sleep=lambda s: None)
    return info.value


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_retry_message_counts_attempts_in_either_language(count: int) -> None:
    i18n.set_language("en")
    english = _fail(count).message
    noun = "attempt" if count == 1 else "attempts"
    assert english == f"autodl: power_off failed after {count} {noun}: server error 500 on POST /power_off"
    i18n.set_language("zh_CN")
    chinese = _fail(count).message
    assert chinese.startswith(f"autodl: power_off 尝试 {count} 次后失败：") and "failed" not in chinese


def test_a_create_is_not_retried_and_says_why_in_chinese() -> None:
    i18n.set_language("zh_CN")
    message = _fail(4, idempotent=False).message
    assert "尝试 1 次后失败（未重试：power_off 不是幂等操作）" in message


# ----------------------------------------------------------------------------- capabilities, storage


def test_a_capability_reads_yes_or_no_with_its_reason() -> None:
    from costctl_providers.capabilities import Capabilities, Capability

    i18n.set_language("en")
    assert str(Capability(True)) == "yes" and str(Capability(False, "no API")) == "no (no API)"
    assert str(Capability(False)) == "no (not supported)"
    assert Capabilities(spot=False).spot.reason == "spot is not supported"
    i18n.set_language("zh_CN")
    assert str(Capability(True)) == "是" and str(Capability(False, "没有 API")) == "否（没有 API）"
    assert str(Capability(False)) == "否（不支持）"
    assert Capabilities(change_gpu=False).change_gpu.reason == "不支持 change gpu"


def _storage(*, note: str, keep: bool, others_note: str):
    from costctl_providers.capabilities import Storage, StoragePath

    paths = [StoragePath("/scratch", survives=False, note=note)]
    if keep:
        paths.append(StoragePath("/data", survives=True))
    return Storage(paths=tuple(paths), others_survive=False, others_note=others_note)


@pytest.mark.parametrize("note", ["", "local disk"])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("others_note", ["", "the root disk is reset"])
def test_every_storage_warning_is_one_sentence_in_either_language(note: str, keep: bool, others_note: str) -> None:
    storage = _storage(note=note, keep=keep, others_note=others_note)
    i18n.set_language("en")
    under = storage.warning("ckpt/", "/scratch/ckpt", "acme")
    outside = storage.warning("ckpt/", "/home/ckpt", "acme")
    assert under.startswith("checkpoint path ckpt/ is under /scratch") and "acme does not keep" in under
    assert (f"/scratch ({note}), which" in under) == bool(note)
    assert under.endswith("keep checkpoints under /data") == keep
    where = "/data" if keep else "the surviving storage"
    assert outside == f"checkpoint path ckpt/ is outside {where} on acme" + (f": {others_note}" if others_note else "")
    assert (storage.warning("ckpt/", "/data/ckpt", "acme") is None) == keep
    i18n.set_language("zh_CN")
    under = storage.warning("ckpt/", "/scratch/ckpt", "acme")
    outside = storage.warning("ckpt/", "/home/ckpt", "acme")
    assert under.startswith("检查点路径 ckpt/ 位于 /scratch") and ("请把检查点放在 /data 之下" in under) == keep
    assert outside.startswith("检查点路径 ckpt/ 不在 ")
    assert outside.endswith(f"：{others_note}" if others_note else "之下" if keep else "存储中")
    assert ("在 acme 上的 /data 之下" in outside) == keep
    for text in (under, outside):  # only the values given stay Latin
        left = text.replace("ckpt", "").replace("acme", "").replace("scratch", "").replace("data", "")
        for value in (note, others_note):
            left = left.replace(value, "")
        assert not ENGLISH_WORD.search(left), text


# ----------------------------------------------------------------------------- price table


def test_a_bad_billing_mode_names_every_allowed_mode() -> None:
    from costctl.catalog.prices import BILLING_MODES, make_entry
    from costctl.errors import ConfigError

    i18n.set_language("en")
    with pytest.raises(ConfigError) as info:
        make_entry("acme", "RTX 4090", "hourly", "1", "USD", "2026-01-01", "test")
    assert info.value.message == ("price for acme RTX 4090: billing 'hourly' is not one of "
                                  + ", ".join(BILLING_MODES))
    assert "prepaid" in info.value.message
    i18n.set_language("zh_CN")
    with pytest.raises(ConfigError) as info:
        make_entry("acme", "RTX 4090", "hourly", "1", "USD", "2026-01-01", "test")
    assert info.value.message == "acme RTX 4090 的价格：计费方式 'hourly' 不是 on-demand, spot, prepaid, from 之一"


def test_a_bad_row_of_a_price_file_names_the_file_and_row_in_chinese() -> None:
    from costctl.catalog.prices import parse_price_csv
    from costctl.errors import ConfigError

    text = "provider,gpu,billing,price_per_gpu_hour,currency,seen,source\nacme,RTX 4090,on-demand,-1,USD,2026-01-01,x\n"
    i18n.set_language("zh_CN")
    with pytest.raises(ConfigError) as info:
        parse_price_csv(text, origin="prices.csv")
    assert info.value.message.startswith("prices.csv 第 2 行：acme RTX 4090 的价格：-1 超出范围")


def test_a_display_conversion_keeps_its_rate_in_the_chinese_label() -> None:
    from costctl.catalog.prices import DisplayConversion
    from costctl.money import ExchangeRate

    conv = DisplayConversion("USD", ExchangeRate(base="USD", quote="CNY", rate=Decimal("7.12"),
                                                 as_of=date(2026, 11, 30)))
    i18n.set_language("en")
    assert conv.label == "≈ USD at 7.12 CNY/USD, 2026-11-30" and conv.rate_text == "7.12 CNY/USD, 2026-11-30"
    i18n.set_language("zh_CN")
    assert conv.label == "≈ USD，按 7.12 CNY/USD，2026-11-30" and conv.rate_text == "7.12 CNY/USD, 2026-11-30"


def test_two_rates_are_named_in_the_footnote_in_either_language() -> None:
    from costctl.catalog.prices import DisplayConversion
    from costctl.cli.gpus import _conversion_heading
    from costctl.money import ExchangeRate

    convs = [DisplayConversion("CNY", ExchangeRate(base=b, quote="CNY", rate=Decimal(r), as_of=date(2026, 1, 1)))
             for b, r in (("USD", "7.1"), ("EUR", "7.8"))]
    i18n.set_language("en")
    assert _conversion_heading(convs, "CNY") == ("≈ CNY", [
        "≈ CNY: converted for display only at 7.1 CNY/USD, 2026-01-01; 7.8 CNY/EUR, 2026-01-01; amounts in two "
        "currencies are never added"])
    i18n.set_language("zh_CN")
    heading, (note,) = _conversion_heading(convs, "CNY")
    assert heading == "≈ CNY" and note == ("≈ CNY：按 7.1 CNY/USD, 2026-01-01; 7.8 CNY/EUR, 2026-01-01 换算，仅供显示；"
                                           "两种货币的金额从不相加")


# ----------------------------------------------------------------------------- costctl gpus / recommend


def _run_cli(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, language: str):
    from costctl.cli.main import main

    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", language)  # [ui] language: chosen when the settings load
    monkeypatch.chdir(tmp_path)
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_gpus_prints_its_table_in_chinese_and_can_still_hide_its_columns(tmp_path, monkeypatch, capsys) -> None:
    from costctl.cli import gpus as gpus_cli

    seen: list[tuple[list[str], tuple[str, ...]]] = []
    real = gpus_cli.print_table

    def recording(table, *, droppable=(), console=None):
        seen.append(([str(c.header) for c in table.columns], tuple(droppable)))
        return real(table, droppable=droppable, console=console)

    monkeypatch.setattr(gpus_cli, "print_table", recording)
    code, out, err = _run_cli(["gpus", "--offline", "--min-memory", "70"], tmp_path, monkeypatch, capsys, "zh_CN")
    assert code == 0, err
    assert out.startswith("GPU 目录（显存：厂商标称 GiB；TF：稠密张量 TFLOPS，FP32 累加）")
    (headers, droppable), = seen
    assert headers[:3] == ["GPU", "显存 GiB", "带宽 GB/s"] and "价格/GPU 小时" in headers and "记录日期" in headers
    assert droppable and set(droppable) <= set(headers)  # the narrow-terminal drop finds every column
    code, out, err = _run_cli(["gpus", "--offline", "--min-memory", "70"], tmp_path, monkeypatch, capsys, "en")
    assert code == 0 and out.startswith("GPU catalog (Mem: vendor's nominal GiB; TF: dense tensor TFLOPS")
    assert set(seen[1][1]) <= set(seen[1][0]) and "Seen" in seen[1][1]


def test_recommend_prints_the_breakdown_in_chinese(tmp_path, monkeypatch, capsys) -> None:
    args = ["recommend", "--offline", "--model", "gpt2", "--lora-rank", "8", "--grad-checkpointing", "--gpus", "2"]
    code, out, err = _run_cli(args, tmp_path, monkeypatch, capsys, "en")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("Memory per GPU: gpt2 (") and first.endswith(
        ", 2 GPU(s), activation checkpointing, LoRA r=8")
    code, out, err = _run_cli(args, tmp_path, monkeypatch, capsys, "zh_CN")
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("每 GPU 显存：gpt2（") and first.endswith("，2 个 GPU，激活检查点, LoRA r=8")
    assert "M 可训练" in first and "批大小 8 x 序列长度 1024" in first
    rows = {ln.split()[0] for ln in out.splitlines()[2:14] if ln.strip()}
    assert {"权重", "梯度", "优化器状态", "激活值", "合计"} <= rows


def test_a_usage_error_of_recommend_is_one_chinese_line(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = _run_cli(["recommend", "--offline", "--params", "7e9", "--model", "gpt2"], tmp_path,
                              monkeypatch, capsys, "zh_CN")
    assert code == 2 and out == ""
    assert err == ("costctl：请恰好给出以下之一：--params（例如 7e9）、--model（预设模型）、--config-json（Hugging Face 的 "
                   "config.json）或 --torch-model FILE.py:FUNC；实际给出了 --params, --model\n")


# ----------------------------------------------------------------------------- peers


def test_the_peers_verdicts_are_chinese_sentences_with_their_values() -> None:
    from datetime import datetime, timezone

    from costctl.records import GpuReading, SignalStatus, TelemetrySample
    from costctl.replay.peers import DSTACK_MINIMUM_WINDOW, dstack_utilization_policy, skypilot_autostop

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    samples = [TelemetrySample(time=start + timedelta(minutes=m), gpus=(GpuReading(index=0, utilization=0.0),),
                               gpu_status=SignalStatus.OK) for m in range(0, 12)]
    i18n.set_language("en")
    sky = skypilot_autostop(samples, min_gpu_utilization=10)
    assert sky.reason == "no job running and no SSH session since 2026-01-01T00:00:00Z (5 min)"
    assert DSTACK_MINIMUM_WINDOW.describe() == ("dstack utilization_policy (min_gpu_utilization=10, time_window=5m, "
                                                "dstack's 5-minute minimum window, the example's threshold)")
    dstack = dstack_utilization_policy(samples, min_gpu_utilization=10, time_window=timedelta(minutes=5),
                                       setting=DSTACK_MINIMUM_WINDOW)
    assert dstack.reason == "GPU 0: all 5 samples since 2025-12-31T23:59:00Z below 10 %"
    i18n.set_language("zh_CN")
    sky = skypilot_autostop(samples, min_gpu_utilization=10)
    assert sky.reason == "自 2026-01-01T00:00:00Z 起没有运行中的任务也没有 SSH 会话（5 分钟）"
    assert sky.rule == "5 分钟内没有运行中的任务也没有 SSH 会话即停止（sky autostop -i 5）"
    assert sky.settings.endswith("SkyPilot 的默认值）")
    dstack = dstack_utilization_policy(samples, min_gpu_utilization=10, time_window=timedelta(minutes=5),
                                       setting=DSTACK_MINIMUM_WINDOW)
    assert dstack.reason == "GPU 0：自 2025-12-31T23:59:00Z 起的全部 5 个采样都低于 10 %"
    assert dstack.settings == ("dstack utilization_policy（min_gpu_utilization=10，time_window=5m，"
                               "dstack 允许的最小 5 分钟窗口，阈值同示例）")


# ----------------------------------------------------------------------------- costctl init --provider


def _init(tmp_path: Path, provider: str, lang: str) -> str:
    """``costctl init --provider PROVIDER`` in a child process under ``LANG=lang``; the file's text."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "COSTCTL_UI__LANGUAGE")}
    env.update(LANG=lang, COSTCTL_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    target = tmp_path / f"{provider}-{lang}.toml"
    done = subprocess.run([sys.executable, "-m", "costctl", "init", "--provider", provider, str(target)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text = target.read_text(encoding="utf-8")
    tomllib.loads(text)
    return text


def _comments(text: str, sep: str) -> str:
    """The file's comments joined into one line by ``sep`` (Chinese is wrapped where there is no
    space: joined by ``""``)."""
    return sep.join(line[line.index("#") + 1:].strip() for line in text.splitlines() if "#" in line)


@pytest.mark.parametrize("provider", ["autodl", "runpod"])
def test_init_writes_the_presets_reasons_in_chinese(tmp_path: Path, provider: str) -> None:
    from costctl_providers.registry import config_preset_of

    i18n.set_language("en")
    preset = config_preset_of(provider)
    english = _init(tmp_path, provider, "C")
    chinese = _init(tmp_path, provider, "zh_CN.UTF-8")
    i18n.set_language("zh_CN")
    joined, english_comments = _comments(chinese, "").replace(" ", ""), _comments(english, " ")
    for sentence in (*preset.summary, *(k.why for k in preset.keys), preset.credential_hint):
        translated = i18n._(sentence)
        assert translated != sentence, sentence
        assert translated.replace(" ", "") in joined, sentence
        assert sentence in english_comments and sentence.replace(" ", "") not in joined
    # the values are the same: only the comments changed language
    assert tomllib.loads(english) == tomllib.loads(chinese)
