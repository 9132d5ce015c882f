"""Messages of the replay, catalog, ledger, lifecycle and watch modules in Simplified Chinese
(issue 16 part 3): whole sentences from the catalogue with their values filled in, the English
unchanged, plurals by count, and the isolated migration child speaking the parent's language."""

from __future__ import annotations

from pathlib import Path

import pytest

from costctl import i18n
from costctl.i18n import _

from replay_support import corpus_file


@pytest.fixture(autouse=True)
def _language_restored(monkeypatch: pytest.MonkeyPatch):
    """Every test chooses its language; the one before it is restored after."""
    for key in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "COSTCTL_UI__LANGUAGE"):
        monkeypatch.delenv(key, raising=False)
    before = i18n.language()
    yield
    i18n.set_language(before)


def test_oom_advice_is_one_chinese_sentence_with_the_numbers() -> None:
    from costctl.lifecycle.oom_retry import advice
    from costctl.records import BatchPlan

    i18n.set_language("en")
    english = advice(BatchPlan(64, 1), None, 8)
    assert english == ("the job ran out of GPU memory at batch 64 x accumulation 1: retry with batch 32 x "
                       "accumulation 2 (effective batch 64); costctl watch --on-oom retry does this by itself")
    i18n.set_language("zh_CN")
    chinese = advice(BatchPlan(64, 1), None, 8)
    assert chinese.startswith("任务耗尽了 GPU 显存") and "retry with" not in chinese
    assert all(f" {n} " in chinese for n in ("64", "32", "2")) and "--on-oom retry" in chinese


def test_a_usage_error_names_the_value_in_either_language() -> None:
    from costctl.catalog.models import shape_from_params
    from costctl.errors import UsageError

    for language, expected in (("en", "--params 0 is not a parameter count"), ("zh_CN", "--params 0 不是参数量")):
        i18n.set_language(language)
        with pytest.raises(UsageError) as info:
            shape_from_params(0)
        assert info.value.message.startswith(expected) and "\n" not in info.value.message


@pytest.mark.parametrize("gpus, english", [(1, "gpu utilization (1 GPU)"), (2, "gpu utilization (2 GPUs)")])
def test_the_signal_names_count_gpus(gpus: int, english: str) -> None:
    from types import SimpleNamespace

    from costctl.replay.analysis import _signals

    scan = SimpleNamespace(gpu_status_seen=True, cpu_status_seen=False, ssh_status_seen=True)
    i18n.set_language("en")
    assert _signals(scan, gpus, [], None) == (  # type: ignore[arg-type]
        [english, "ssh sessions"], ["cpu (not recorded)", "training progress (no training log)"])
    i18n.set_language("zh_CN")
    used, absent = _signals(scan, gpus, [], None)  # type: ignore[arg-type]
    assert used == [f"GPU 利用率（{gpus} 个 GPU）", "SSH 会话"]
    assert absent == ["CPU（未记录）", "训练进度（没有训练日志）"]


def test_analyze_prints_its_tables_and_lines_in_chinese(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from costctl.cli.main import main

    log = corpus_file("gpu_query_forgotten_idle.csv")
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", "zh_CN")  # [ui] language: chosen when the settings load
    monkeypatch.chdir(tmp_path)
    code = main(["analyze", "--gpu-log", str(log), "--price", "2.5", "--currency", "CNY"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    # the final stretch: to the end of the log, the idle stop 30 min into it (as in English)
    assert any("02:33:37.502" in r and "日志结束" in r and "03:03:37.575 停止" in r and "¥13.48" in r for r in rows)
    assert any("01:39:22.203" in r and "工作恢复" in r and "未停止" in r for r in rows)
    text = "".join(out.split())
    assert "缺失的信号（不参与判断）：CPU（未记录）" in text
    assert "事后最优（完全事后视角）：在2026-02-0202:33:37.502停止" in text and "节省¥13.48" in text
    assert "end of log" not in out and "signals absent" not in out and "CN¥" not in out  # ¥ for yuan in Chinese


@pytest.mark.parametrize("parent, environment, phrase", [
    ("zh_CN", "C", "无法将数据库升级到 nosuchrevision"),
    ("en", "zh_CN.UTF-8", "cannot upgrade the database to nosuchrevision"),
])
def test_an_isolated_migration_fails_in_the_parents_language(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            parent: str, environment: str, phrase: str) -> None:
    """The child reads the language from the parent (a configured ``[ui] language`` is not in its
    environment): its one line comes back in the parent's language, whatever LANG says."""
    import sqlalchemy as sa

    from costctl.errors import LedgerError
    from costctl.ledger import migrate

    monkeypatch.setenv("LANG", environment)
    i18n.set_language(parent)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(LedgerError) as info:
            migrate.upgrade(engine, "nosuchrevision", isolated=True)
    finally:
        engine.dispose()
    assert info.value.message.startswith(phrase), info.value.message
    assert "\n" not in info.value.message


def test_a_ledger_error_places_the_translated_action_in_the_translated_sentence() -> None:
    import sqlalchemy as sa

    from costctl.errors import LedgerError
    from costctl.ledger.engine import translate_errors

    for language, expected in (("en", "cannot read the ledger (sqlite:///x.db): database is locked"),
                               ("zh_CN", "无法读取账本（sqlite:///x.db）：database is locked")):
        i18n.set_language(language)
        with pytest.raises(LedgerError) as info:
            with translate_errors(_("read the ledger"), "sqlite:///x.db"):
                raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))
        assert info.value.message == expected


def test_a_ledger_path_error_is_one_chinese_line(tmp_path: Path) -> None:
    from costctl.errors import LedgerError
    from costctl.ledger.engine import make_engine

    i18n.set_language("zh_CN")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LedgerError) as info:
        make_engine(f"sqlite:///{blocker / 'x.db'}")
    assert info.value.message == f"无法创建数据库 {blocker / 'x.db'} 所在的目录：该位置已有一个文件（不是目录）"
