"""costctl in Simplified Chinese and in English, as a user's shell chooses (issue 16, part 3):
``LANG=zh_CN.UTF-8`` gives Chinese help (click's own words too), errors and messages; ``LANG=C``
gives English. Real ``costctl`` processes, each with only the locale variables we set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def costctl(args: list[str], *, lang: str, tmp_path: Path, extra_env: dict[str, str] | None = None,
            **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COSTCTL_", "LC_", "LANG"))}
    env.update({"LANG": lang, "COSTCTL_DATA_DIR": str(tmp_path / "data"),
                "COSTCTL_CONFIG": str(tmp_path / "none.toml"), "PYTHONPATH": str(ROOT)})
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "costctl", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, **kw)


def test_help_is_chinese_under_a_chinese_locale_with_clicks_own_words(tmp_path) -> None:
    r = costctl(["--help"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "用法：" in out and "选项" in out and "命令" in out and "显示此帮助信息并退出。" in out
    assert "别再为租用的 GPU 白花钱" in out
    assert "Usage:" not in out and "Show this message and exit." not in out


def test_help_is_english_under_lang_c(tmp_path) -> None:
    r = costctl(["--help"], lang="C", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Usage:" in r.stdout and "Options" in r.stdout and "Show this message and exit." in r.stdout
    assert not any("\u4e00" <= c <= "\u9fff" for c in r.stdout)


def test_a_usage_error_is_chinese_under_a_chinese_locale(tmp_path) -> None:
    r = costctl(["bill", "--limit", "0"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 2
    assert "用法： costctl bill" in r.stderr and "运行 'costctl bill --help' 查看帮助。" in r.stderr
    assert "错误：" in r.stderr and "Traceback" not in r.stderr
    r = costctl(["bill", "--limit", "0"], lang="C", tmp_path=tmp_path)
    assert r.returncode == 2 and "Usage: costctl bill" in r.stderr and "Error: " in r.stderr


@pytest.mark.parametrize("value, want_zh", [("zh_CN", True), ("en", False)])
def test_the_ui_language_setting_wins_over_the_locale(tmp_path, value, want_zh) -> None:
    r = costctl(["--help"], lang="C" if want_zh else "zh_CN.UTF-8", tmp_path=tmp_path,
                extra_env={"COSTCTL_UI__LANGUAGE": value})
    assert r.returncode == 0
    assert ("用法：" in r.stdout) is want_zh


def _has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


@pytest.mark.parametrize("toml, key", [('[stop]\ndeadline = "soon"\n', "stop.deadline"),
                                       ('[policies.idle]\ntime_windw = "10m"\n', "policies.idle.time_windw")])
def test_a_config_error_is_chinese_under_a_chinese_locale_and_english_under_c(tmp_path, toml, key) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(toml)
    r = costctl(["bill", "--config", str(bad)], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
    assert ("未知配置项" in r.stderr) if "windw" in key else ("之间的时长，写法如" in r.stderr), r.stderr
    assert "expected" not in r.stderr and "unknown key" not in r.stderr
    r = costctl(["bill", "--config", str(bad)], lang="C", tmp_path=tmp_path)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr and not _has_chinese(r.stderr)
    assert (f"unknown key '{key}'" in r.stderr) if "windw" in key else ("expected a duration from" in r.stderr)


@pytest.mark.parametrize("args, chinese, english", [
    (["bill", "--bogus"], "错误：没有这个选项：--bogus", "Error: No such option: --bogus"),
    (["bill", "--limit"], "错误：选项 '--limit' 需要一个值。", "Error: Option '--limit' requires an argument."),
    (["bill", "--limit", "x"], "错误：'--limit' 的值无效：'x'：应为整数",
     "Error: Invalid value for '--limit': 'x': expected a whole number"),
])
def test_clicks_own_errors_speak_the_locales_language(tmp_path, args, chinese, english) -> None:
    r = costctl(args, lang="zh_CN.UTF-8", tmp_path=tmp_path)
    assert r.returncode == 2 and chinese in r.stderr, r.stderr
    r = costctl(args, lang="C", tmp_path=tmp_path)
    assert r.returncode == 2 and english in r.stderr and not _has_chinese(r.stderr), r.stderr


def test_the_config_files_language_applies_to_help_click_errors_and_config_errors(tmp_path) -> None:
    (tmp_path / "costctl.toml").write_text('[ui]\nlanguage = "zh_CN"\n')
    env = {"COSTCTL_CONFIG": ""}  # ./costctl.toml, as costctl reads it
    r = costctl(["--help"], lang="C", tmp_path=tmp_path, extra_env=env)
    assert "用法：" in r.stdout, r.stdout
    r = costctl(["bill", "--bogus"], lang="C", tmp_path=tmp_path, extra_env=env)
    assert "没有这个选项：--bogus" in r.stderr, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[ui]\nlanguage = "zh_CN"\n[stop]\ndeadline = "soon"\n')
    r = costctl(["bill", "--config", str(bad)], lang="C", tmp_path=tmp_path)
    assert r.returncode == 2 and "之间的时长" in r.stderr, r.stderr


def test_an_invalid_language_is_reported_in_the_language_the_rest_choose(tmp_path) -> None:
    r = costctl(["bill"], lang="zh_CN.UTF-8", tmp_path=tmp_path, extra_env={"COSTCTL_UI__LANGUAGE": "fr", "COSTCTL_CONFIG": ""})
    assert r.returncode == 2 and "环境变量 COSTCTL_UI__LANGUAGE" in r.stderr, r.stderr


def test_a_bad_list_item_from_a_variable_names_the_variable_not_the_file(tmp_path) -> None:
    (tmp_path / "empty.toml").write_text("")
    r = costctl(["bill"], lang="C", tmp_path=tmp_path,
                extra_env={"COSTCTL_CONFIG": str(tmp_path / "empty.toml"), "COSTCTL_NOTIFY__URLS": '["json://x", 5]'})
    assert r.returncode == 2 and "environment variable COSTCTL_NOTIFY__URLS" in r.stderr, r.stderr
    assert "empty.toml" not in r.stderr


_ALL_HELP = """
import re, sys
from costctl.cli import main as m
m._register([])
import typer.main
group = typer.main.get_command(m.app)
paths = [[]]
for name, cmd in group.commands.items():
    paths.append([name])
    for sub in getattr(cmd, "commands", {}):
        paths.append([name, sub])
names = set()
def walk(cmd):
    for p in cmd.params:
        names.update(o for o in p.opts + p.secondary_opts if o.startswith("--"))
    for sub in getattr(cmd, "commands", {}).values():
        walk(sub)
walk(group)
for path in paths:
    print("=== " + " ".join(path))
    m.main([*path, "--help"])
print("=== OPTIONS " + " ".join(sorted(names)))
"""


@pytest.mark.parametrize("columns", [80, 100])
def test_chinese_help_fits_the_terminal_by_display_width_and_keeps_option_names_whole(tmp_path, columns) -> None:
    from rich.cells import cell_len

    env = {k: v for k, v in os.environ.items() if not k.startswith(("COSTCTL_", "LC_", "LANG"))}
    env.update({"LANG": "zh_CN.UTF-8", "COLUMNS": str(columns), "COSTCTL_DATA_DIR": str(tmp_path / "data"),
                "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, "-c", _ALL_HELP], env=env, capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out, _sep, names = r.stdout.rpartition("=== OPTIONS ")
    known = set(names.split()) | {"--help", "--query-gpu"}  # click's own; nvidia-smi's, in a help text
    assert out.count("=== ") > 15 and "用法：" in out and "--accum-steps" in out
    too_wide = [line for line in out.splitlines() if cell_len(line) > columns]
    assert not too_wide
    import re
    cut = sorted({o for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out)} - known)
    assert not cut  # an option name split across lines would show as an unknown prefix
    assert not [line for line in out.splitlines() if re.search(r"[A-Za-z]-$", line)]


def test_every_command_has_a_chinese_summary_in_the_top_level_help(tmp_path) -> None:
    r = costctl(["--help"], lang="zh_CN.UTF-8", tmp_path=tmp_path)
    commands = r.stdout.split("命令:")[1].splitlines()
    rows = [line.split(None, 1) for line in commands if line.startswith("  ") and line.strip()]
    assert {row[0] for row in rows} >= {"init", "db", "watch", "bill"}
    assert all(len(row) == 2 and row[1] != "..." and _has_chinese(row[1]) for row in rows), rows


def test_a_toml_syntax_error_names_its_line_and_column_in_each_language(tmp_path) -> None:
    """tomllib's detail is English: it is kept under ``LANG=C`` and left out in Chinese, where
    the position alone is said in a Chinese sentence."""
    (tmp_path / "bad.toml").write_text("[watch]\nsample_interval 5s\n")
    env = {"COSTCTL_CONFIG": str(tmp_path / "bad.toml")}
    english = costctl(["bill"], lang="C", tmp_path=tmp_path, extra_env=env)
    chinese = costctl(["bill"], lang="zh_CN.UTF-8", tmp_path=tmp_path, extra_env=env)
    assert english.returncode == chinese.returncode == 2
    assert "bad.toml: not valid TOML at line 2, column 17: Expected '=' after a key" in english.stderr
    assert "bad.toml：第 2 行第 17 列不是有效的 TOML" in chinese.stderr, chinese.stderr
    assert "Expected" not in chinese.stderr and "Traceback" not in chinese.stderr + english.stderr
