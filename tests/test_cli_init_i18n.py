"""``costctl init`` in Simplified Chinese (issue 16 part 3): the comments follow the language
(``LANG``/``LC_ALL``, ``[ui] language``, ``COSTCTL_UI__LANGUAGE``), the keys and values never do.

* The shipped Chinese example (``costctl/data/costctl.example.zh_CN.toml``) is kept key for key
  and value for value with the English one, its generated ``[policies.*]`` part included.
* Every file ``init`` writes, plain or ``--provider``, parses to the same TOML in both languages.
* No comment line is wider than ``LINE_WIDTH`` columns, counting a CJK character as two.
* The Chinese AutoDL config runs as is in the simulated AutoDL container of
  tests/test_cli_init_provider.py.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest
from rich.cells import cell_len
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl import i18n
from costctl.cli.init import (LINE_WIDTH, POLICIES_BEGIN, POLICIES_END, TEMPLATES, example_config, key_lines,
                              markers, policies_toml, provider_config, splice_policies, wrap)
from costctl.cli.main import main
from costctl.config import load_settings
from costctl.ledger.schema import Instance as InstanceRow
from costctl.ledger.schema import Run, StopEventRow
from costctl_providers.registry import available_providers, config_preset_of
from helpers import costctl_env, run_costctl

CJK = re.compile("[\u4e00-\u9fff]")
CONTAINER_ID = "7c8a11a4a1-3e0b7d2c"
#: A key line, set or commented out, and a table header: what must be the same in every language
#: (the comment after it, at two or more spaces or one space and "# ", is what differs).
CODE = re.compile(r"^(# )?(\[\[?[\w.]+\]\]?|[A-Za-z_]\w* = .*?)(?:\s+# .*|\s+#)?$")


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)
    for key in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    before = i18n.language()
    yield
    i18n.set_language(before)


def _shipped(language: str) -> str:
    return resources.files("costctl").joinpath(TEMPLATES[language]).read_text(encoding="utf-8")


def _is_toml(code: str) -> bool:
    try:
        tomllib.loads(code)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _code(text: str) -> list[str]:
    """The file less its comments: every table header and key line (``# key = value`` of a key
    shown commented out too), in order; a line of prose that happens to start like a key
    (``# token = "..." (chmod 600).``) is no key line."""
    return [f"{m.group(1) or ''}{m.group(2)}" for line in text.splitlines()
            if (m := CODE.match(line)) and _is_toml(m.group(2).replace("= ...", "= 0"))]


def _in(language: str, make, *args, **kwargs) -> str:
    i18n.set_language(language)
    return make(*args, **kwargs)


# ----------------------------------------------------------------------------- the two templates


def test_the_chinese_example_keeps_the_english_keys_and_values_in_lockstep():
    """The committed Chinese example must show the same keys (set or commented out), tables and
    values, in the same order, as the English one: a key added to one and not the other fails
    here. Its comments are Chinese."""
    english, chinese = _shipped("en"), _shipped("zh_CN")
    assert tomllib.loads(english) == tomllib.loads(chinese)
    code_en, code_zh = _code(english), _code(chinese)
    assert len(code_en) > 150
    assert code_en == code_zh
    i18n.set_language("zh_CN")
    assert markers()[0] in chinese and markers()[1] in chinese and markers() != (POLICIES_BEGIN, POLICIES_END)
    comments = [line.split("#", 1)[1] for line in chinese.splitlines() if "#" in line]
    untranslated = [c for c in comments if not CJK.search(c) and re.search(r"\b[a-z]{4,} [a-z]{4,} [a-z]{4,}\b", c)]
    assert not untranslated, untranslated


def test_wrapping_keeps_a_range_on_one_line():
    from costctl.cli.init import wrap

    for text in ("运行的总步数，输出中没有给出时使用（用于估算平台期的花费）（1 到 1000000000000）",
                 "length of the run, when the output does not say (plateau cost estimate) (1 to 1000000000000)"):
        lines = wrap(text, 40)
        assert any(line.endswith(("（1 到 1000000000000）", "(1 to 1000000000000)")) for line in lines), lines
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_the_shipped_chinese_example_holds_the_generated_policy_tables():
    """As the English one (tests/test_policies_plugins.py): the committed file's [policies.*]
    part is what init generates, here in Chinese. After a change to a policy's fields or their
    translations, regenerate it: ``COSTCTL_UI__LANGUAGE=zh_CN costctl init x.toml`` and copy the
    part between the markers."""
    from costctl.policies import registrations

    i18n.set_language("zh_CN")
    template = _shipped("zh_CN")
    builtins = [s for s in registrations() if s.cls.__module__.startswith("costctl.")]
    assert splice_policies(template, policies_toml(builtins)) == template


@pytest.mark.parametrize("provider", [None, *available_providers()])
def test_every_file_init_writes_is_the_same_toml_in_both_languages(provider):
    make = example_config if provider is None else (lambda: provider_config(provider))
    english, chinese = _in("en", make), _in("zh_CN", make)
    assert tomllib.loads(english) == tomllib.loads(chinese)
    assert _code(english) == _code(chinese)
    # English comments only (no Chinese word in an English file), Chinese comments
    assert not CJK.search(english) and len(CJK.findall(chinese)) > 1000
    # an allowed range ("(1 to 100)", "（1 到 100）", "(1s to 8760h, or off)") is never broken
    # over two lines: no comment line ends inside one nor starts with the tail of one
    for text in (english, chinese):
        for line in text.splitlines():
            comment = line.split("#", 1)[1].rstrip() if "#" in line else ""
            assert not re.search(r"[（(](?:[^（）()]*(?:\bto|到)|[\d.]+\w*)$", comment), line
            assert not re.match(r"\s*(?:[\d.]+\w*|(?:or |或 ?)?off)[）)]", comment), line
    # every reason of the preset is written whole, in Chinese (the comments joined: Chinese is
    # wrapped where there is no space)
    i18n.set_language("zh_CN")
    joined = "".join(line.split("#", 1)[1].strip() for line in chinese.splitlines() if "#" in line)
    if provider is not None:
        preset = config_preset_of(provider)
        for sentence in (*preset.summary, *(k.why for k in preset.keys), preset.credential_hint):
            if sentence:
                assert i18n._(sentence).replace(" ", "") in joined.replace(" ", ""), sentence


@pytest.mark.parametrize("language", ["en", "zh_CN"])
@pytest.mark.parametrize("provider", [None, *available_providers()])
def test_no_comment_line_passes_the_line_width(language, provider):
    make = example_config if provider is None else (lambda: provider_config(provider, gpu_count=8))
    text = _in(language, make)
    wide = [(cell_len(line), line) for line in text.splitlines() if "#" in line and cell_len(line) > LINE_WIDTH]
    assert not wide, wide


# ----------------------------------------------------------------------------- wrapping


def test_wrapping_counts_a_chinese_character_as_two_columns():
    text = "在容器内执行 shutdown 会关闭实例并停止 GPU 计费，无需令牌：这是最后的关停手段（设置了 AUTODL_TOKEN 时优先使用 API 的 power_off）。"
    lines = wrap(text, 30)
    assert all(cell_len(line) <= 30 for line in lines), lines
    assert any(cell_len(line) >= 26 for line in lines[:-1])  # filled, not cut at the first space
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost
    # a counter of characters (len) would have put 30 Chinese characters, 60 columns, on a line
    assert max(len(line) for line in lines) < 30
    # never before a closing mark, never after an opening one
    assert not any(line[0] in "，。；：、）" or line[-1] in "（" for line in lines), lines


def test_wrapping_english_breaks_at_spaces_and_folds_only_a_word_longer_than_a_line():
    assert wrap("one two three four", 9) == ["one two", "three", "four"]
    assert wrap("see https://example.com/a/very/long/path now", 12) == [
        "see", "https://exam", "ple.com/a/ve", "ry/long/path", "now"]


def test_a_long_comment_continues_under_its_column():
    lines = key_lines("time_window", "30m", "每个现有信号须保持空闲多久，或 \"off\"" * 4)
    assert lines[0].startswith('time_window = "30m"         # ')
    assert len(lines) > 1 and all(line.startswith(" " * 28 + "# ") for line in lines[1:])
    assert all(cell_len(line) <= LINE_WIDTH for line in lines)


# ----------------------------------------------------------------------------- choosing the language


def _written(tmp_path: Path, capsys, *args: str) -> tuple[str, str]:
    path = tmp_path / f"out-{len(list(tmp_path.glob('out-*.toml')))}.toml"
    assert main(["init", str(path), *args]) == 0
    return path.read_text(encoding="utf-8"), capsys.readouterr().err


@pytest.mark.parametrize("how", ["LANG", "LC_ALL", "COSTCTL_UI__LANGUAGE", "[ui] language"])
def test_init_writes_chinese_comments_as_the_language_is_chosen(tmp_path, capsys, monkeypatch, how):
    if how == "[ui] language":
        (tmp_path / "costctl.toml").write_text('[ui]\nlanguage = "zh_CN"\n')
        monkeypatch.setenv("COSTCTL_CONFIG", str(tmp_path / "costctl.toml"))
    else:
        monkeypatch.setenv(how, "zh_CN.UTF-8" if how != "COSTCTL_UI__LANGUAGE" else "zh_CN")
    text, err = _written(tmp_path, capsys, "--provider", "autodl")
    assert text.startswith("# costctl.toml — costctl 的配置文件（由 `costctl init --provider autodl` 生成）。")
    assert "AutoDL 以人民币元计费" in text and "# ---- [policies.*] 结束 ----" in text
    assert err.startswith("已写入 ")
    i18n.set_language("en")
    assert tomllib.loads(text) == tomllib.loads(provider_config("autodl"))


def test_the_environment_wins_over_the_config_files_language(tmp_path, capsys, monkeypatch):
    (tmp_path / "costctl.toml").write_text('[ui]\nlanguage = "zh_CN"\n')
    monkeypatch.setenv("COSTCTL_CONFIG", str(tmp_path / "costctl.toml"))
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", "en")
    text, err = _written(tmp_path, capsys)
    assert not CJK.search(text) and err.startswith("wrote ")


def test_a_broken_config_file_does_not_stop_init(tmp_path, capsys, monkeypatch):
    """init is how a config gets fixed: an unreadable one only leaves the language to the locale."""
    (tmp_path / "costctl.toml").write_text("[ui\nlanguage = \n")
    monkeypatch.setenv("COSTCTL_CONFIG", str(tmp_path / "costctl.toml"))
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    text, _err = _written(tmp_path, capsys)
    assert CJK.search(text)


def test_a_bad_option_is_one_chinese_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COSTCTL_UI__LANGUAGE", "zh_CN")
    code = main(["init", str(tmp_path / "x.toml"), "--provider", "autodl", "--gpu", "Voodoo 5"])
    err = capsys.readouterr().err
    assert code == 2 and "--gpu 'Voodoo 5' 既不在 costctl 的 GPU 目录中" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.toml").exists()


# ----------------------------------------------------------------------------- inside an AutoDL container


def test_the_chinese_autodl_config_runs_as_is_inside_a_simulated_container(tmp_path, capsys, monkeypatch):
    """tests/test_cli_init_provider.py's container test with the file written in Chinese and the
    watch run under ``LANG=zh_CN.UTF-8``: the Chinese comments change nothing the watch reads."""
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    config = tmp_path / "costctl.toml"
    assert main(["init", str(config), "--provider", "autodl"]) == 0
    assert CJK.search(config.read_text(encoding="utf-8"))
    settings = load_settings(config)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "shutdown.called"
    script = bin_dir / "shutdown"
    script.write_text(f"#!/bin/sh\necho \"ran $*\" > '{called}'\nkill -9 $PPID\nexit 0\n")
    script.chmod(0o755)
    data = tmp_path / "data"
    env = costctl_env(data, AUTODL_CONTAINER_HOSTNAME=f"autodl-container-{CONTAINER_ID}",
                      PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", LANG="zh_CN.UTF-8")
    for key in ("AUTODL_TOKEN", "AUTODL_CONSOLE_TOKEN", "LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        env.pop(key, None)
    marker = tmp_path / "job-ran"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran'); print('loss: 0.5')"]
    proc = run_costctl("watch", "--on-exit", "stop", "--config", str(config), "--", *job, env=env, timeout=90)
    out = proc.stderr.decode()
    assert "Traceback" not in out and "costctl: error" not in out and "错误" not in out, out
    assert proc.returncode == -9, out  # the "machine" powered off under the watch
    assert marker.exists() and called.read_text().strip() == "ran"
    assert f"通过 shutdown 自关停（本机是 autodl 实例 {CONTAINER_ID}；shutdown 位于 {bin_dir / 'shutdown'}）" in out
    engine = create_engine(f"sqlite:///{data / 'costctl.db'}")
    with Session(engine) as session:
        inst = session.scalars(select(InstanceRow)).one()
        run = session.scalars(select(Run)).one()
        events = session.scalars(select(StopEventRow).order_by(StopEventRow.id)).all()
    assert (inst.provider, inst.provider_instance_id, inst.currency) == ("autodl", CONTAINER_ID, "CNY")
    assert (run.price_per_hour, run.price_currency) == (settings.instance.price_per_hour, "CNY")
    assert [e.state for e in events] == ["requested", "self-stop sent"]


def test_the_gpu_count_a_provider_config_sets_keeps_its_range():
    """``--gpu-count`` rewrites the key's line; its range stays in the comment, in either language."""
    english = _in("en", provider_config, "autodl", gpu_count=4)
    chinese = _in("zh_CN", provider_config, "autodl", gpu_count=4)
    assert re.search(r"^gpu_count = 4 +# GPUs on the instance \(1 to 64\)$", english, re.M)
    assert re.search(r"^gpu_count = 4 +# 实例上的 GPU 数（1 到 64）$", chinese, re.M)
