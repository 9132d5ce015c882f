"""Machine values shown to people go through one mapping (``costctl.i18n.DISPLAY_WORDS``):
statuses, stop states, billing kinds with their tiers, decision actions and AutoDL's no-GPU mode
are words of the reader's language in tables, while JSON keeps the values (issue 16, part 3)."""

from __future__ import annotations

import json
import re

from costctl import i18n
from costctl.report import status_text
from costctl.summary import action_text
from test_i18n_cli import costctl

CJK = re.compile("[\u4e00-\u9fff]")


def test_every_display_word_has_a_chinese_word_and_english_is_the_value_itself() -> None:
    with i18n.in_language("zh_CN"):
        missing = [v for v in i18n.DISPLAY_WORDS if not CJK.search(i18n.display_word(v))]
        assert status_text("interrupted") == "已中断" and action_text("release") == "释放"
    assert not missing, missing
    with i18n.in_language("en"):
        assert all(i18n.display_word(v) == v for v in i18n.DISPLAY_WORDS)
        assert i18n.display_word("exited (137)") == "exited (137)"  # a provider's own word: as it is


def test_the_gpus_table_says_billing_kinds_and_the_no_gpu_mode_in_chinese_and_json_keeps_the_values(tmp_path) -> None:
    (tmp_path / "none.toml").write_text("")
    table = costctl(["gpus"], lang="zh_CN.UTF-8", tmp_path=tmp_path, extra_env={"COLUMNS": "250"})
    assert table.returncode == 0, table.stderr
    for english in ("on-demand", "prepaid monthly", "from on-demand listings", "no-GPU mode", " spot "):
        assert english not in table.stdout, english
    assert "按需（社区）" in table.stdout and "无卡模式" in table.stdout and "包月" in table.stdout
    data = costctl(["gpus", "--format", "json"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert data.returncode == 0, data.stderr
    prices = [row["price"] for row in json.loads(data.stdout) if row.get("price")]
    assert {p["billing"] for p in prices} >= {"on-demand", "prepaid", "from"}
    assert not [p for p in prices if CJK.search(p["billing"] + (p["tier"] or "") + p["gpu"])]
    assert "no-GPU mode" in {p["gpu"] for p in prices}
