"""--help laid out by display width (costctl.cli.help_format): CJK characters take two cells,
lines break between wide characters or at spaces, never inside an English word or option name."""

from __future__ import annotations

from rich.cells import cell_len

from costctl.cli.help_format import short_help, tokens, wrap_text


def test_tokens_keep_narrow_runs_whole_and_punctuation_with_its_text() -> None:
    assert tokens("用 --accum-steps，再试") == ["用", " ", "--accum-steps，", "再", "试"]
    assert tokens("（gpt2）和") == ["（gpt2）", "和"]


def test_chinese_wraps_by_cells_without_splitting_words() -> None:
    text = "在监看下运行 COMMAND：采样 GPU 使用情况，解析 loss，累计花费，执行各项策略，见 --accum-steps 与 --batch-size。" * 3
    for width in (20, 37, 80):
        lines = wrap_text(text, width, initial_indent="  ", subsequent_indent="  ").splitlines()
        assert all(cell_len(line) <= width for line in lines), lines
        joined = "".join(line.strip() for line in lines)
        assert joined.replace(" ", "") == text.replace(" ", "")
        assert not any(line.strip().startswith(("，", "。", "-steps", "steps")) for line in lines)


def test_english_wraps_at_spaces_as_before() -> None:
    text = "Run COMMAND under watch: sample GPU use, parse loss, accrue spend, enforce policies."
    assert wrap_text(text, 30) == "Run COMMAND under watch:\nsample GPU use, parse loss,\naccrue spend, enforce\npolicies."


def test_short_help_by_display_width() -> None:
    assert short_help("写一份带注释的示例配置。其余的说明。", 40) == "写一份带注释的示例配置。"
    got = short_help("写一份带注释的示例配置，列出每个配置项及其默认值，或为云服务商写一份", 20)
    assert got.endswith("...") and cell_len(got) <= 20 and got != "..."
    assert short_help("Show spend. More words here.", 15) == "Show spend."


def test_the_cli_language_comes_from_a_valid_setting_only_and_never_raises(tmp_path) -> None:
    from costctl.cli.language import configured_language

    (tmp_path / "costctl.toml").write_text('[ui]\nlanguage = "zh_CN"\n')
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "fr.toml").write_text('[ui]\nlanguage = "fr"\n')
    assert configured_language([], {}, tmp_path) == "zh_CN"
    assert configured_language(["bill", "--config", str(tmp_path / "fr.toml")], {}, tmp_path) is None
    assert configured_language([f"--config={tmp_path / 'deep.toml'}"], {}, tmp_path) is None
    assert configured_language([], {"COSTCTL_CONFIG": str(tmp_path / "missing.toml")}, tmp_path) is None
    assert configured_language([], {"COSTCTL_UI__LANGUAGE": "en"}, tmp_path) == "en"
    assert configured_language([], {"COSTCTL_UI__LANGUAGE": "fr"}, tmp_path) == "zh_CN"
