"""Issue 17, the fresh tester's findings after the bounds were built: each a named regression test.

1. A catastrophic ``--loss-regex`` (``(x+x+)+y`` on a long line of x's) hung ``costctl analyze``
   and stalled a watch's output parser: user patterns now run on the ``regex`` engine with a
   time budget per line (costctl.user_regex); a line that times out is skipped and counted, and
   a pattern that keeps timing out is turned off (the built-in shapes read on).
2. ``COSTCTL_NOTIFY__URLS=notjson`` (a list-valued setting given no JSON list) said a
   pydantic-settings line naming no variable: now the variable, the value (hidden: notify URLs
   hold tokens) and what is allowed.
3. ``analyze --gpu-log`` of an empty or garbage file called it a training log.
4. One record nested 2,000 deep in a trainer_state.json's log_history refused the whole file.
5. A NUL inside a number (``loss: 0.\\x0025``) was dropped, reading 0.25.
6. Minor: a TOML float of 1e400 echoed as "inf"; "1_000" accepted as money; a directory named
   costctl.toml ignored; ``costctl bill`` created the default data dir; control characters
   raw in error messages; a 400-digit step in a JSON metrics file made ``--step-rate`` say
   "neither steps nor epochs".
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.config import find_config_file, load_settings
from costctl.errors import ConfigError, UsageError
from costctl.jsonio import JsonTooDeep, loads_skipping_deep
from costctl.money import AmountError, bounded_amount
from costctl.progress import lines
from costctl.progress.lines import LineParser, clean_line
from costctl.progress.output import OutputProgress
from costctl.user_regex import MAX_TIMEOUTS, compile_user_regex
from costctl.validation import escape_controls
from helpers import REPO, costctl_cmd, costctl_env

ENGINES = ["python"] + (["native"] if lines._scan is not None else [])
#: A pattern whose search backtracks exponentially on a line of x's without a "y" (the `regex`
#: engine does not optimise this one away; Python's re takes seconds at 30 x's, years at 100).
CATASTROPHIC = r"(x+x+)+y"


def _analyze_json(capsys, *args: str) -> dict:
    code = main(["analyze", *args, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, err
    return json.loads(out)


def _analyze_error(capsys, *args: str) -> str:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err, err
    lines_ = err.strip().splitlines()
    assert len(lines_) == 1, err
    return lines_[0]


# -- 1. a catastrophic user regex ------------------------------------------------------------------
def test_user_regex_search_that_runs_past_its_budget_is_no_match_counted_and_turned_off_after_max():
    user = compile_user_regex(CATASTROPHIC, option="--loss-regex")
    assert user.search("xxy") is not None
    for i in range(MAX_TIMEOUTS):
        assert not user.disabled
        assert user.search("x" * 5000) is None
        assert user.timeouts == i + 1
    assert user.disabled and user.search("xxy") is None  # turned off: nothing more is searched


def test_an_invalid_user_regex_is_one_line_naming_the_option_and_the_pattern_escaped():
    with pytest.raises(UsageError) as info:
        compile_user_regex("loss: (\x1b", option="--loss-regex")
    assert info.value.message.startswith("--loss-regex 'loss: (\\x1b' is not a valid regular expression (")


@pytest.mark.parametrize("engine", ENGINES)
def test_line_parser_with_a_catastrophic_regex_skips_those_lines_then_reads_the_built_in_shapes(engine):
    parser = LineParser(r"(?P<loss>(x+x+)+y)", engine=engine)
    text = "".join(f"{'x' * 3000}\nstep {i} loss: 0.{i}5\n" for i in range(MAX_TIMEOUTS + 3))
    batch = parser.feed_batch(text.encode(), 0.0)
    user = parser.user_regex
    assert user is not None and user.timeouts == MAX_TIMEOUTS and user.disabled
    # the lines after the one it was turned off on are read by the built-in shapes, with their steps
    assert list(batch.steps) == list(range(MAX_TIMEOUTS - 1, MAX_TIMEOUTS + 3))  # from the line after the 10th
    assert parser.lines_seen == 2 * (MAX_TIMEOUTS + 3)


def test_analyze_with_a_catastrophic_loss_regex_on_a_100_kb_line_finishes_and_says_the_skips(tmp_path):
    """In a child process with a generous timeout (a hang is a TimeoutExpired, not a slow test)."""
    log = tmp_path / "train.log"
    log.write_text("x" * 100_000 + "\n" + "".join(f"loss: {1 / (i + 1):.3f}\n{'x' * 60_000}\n" for i in range(30)))
    proc = subprocess.run(costctl_cmd("analyze", "--train-log", str(log), "--loss-regex", CATASTROPHIC,
                                      "--format", "json"),
                          env=costctl_env(tmp_path / "data"), cwd=REPO, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr.decode()
    d = json.loads(proc.stdout)["train_log"]
    assert d["loss_regex_timeouts"] == MAX_TIMEOUTS and d["loss_regex_disabled"] is True
    assert d["long_lines_skipped"] == 1  # the 100 kB line: over the line limit, never searched
    # the built-in shapes read the loss lines after the pattern was turned off
    assert 0 < d["train_points"] < 30
    text = subprocess.run(costctl_cmd("analyze", "--train-log", str(log), "--loss-regex", CATASTROPHIC),
                          env=costctl_env(tmp_path / "data"), cwd=REPO, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL).stdout.decode()
    flat = " ".join(text.split())
    assert f"{MAX_TIMEOUTS} lines took --loss-regex longer than 50 ms each and were skipped" in flat
    assert f"--loss-regex was turned off after it timed out on {MAX_TIMEOUTS} lines" in flat


JOB_CATASTROPHIC = """
import sys
for i in range(25):
    print("x" * 3000, flush=True)
    print(f"step {i} loss: {1 / (i + 1):.3f}", flush=True)
print("job done", flush=True)
sys.exit(3)
"""


def test_watch_of_a_job_printing_catastrophic_lines_passes_the_output_through_and_exits_with_the_job(tmp_path):
    """The output thread never runs the user's pattern (its searches are on the parser thread,
    each within the budget): every byte passes through, the watch says the timeouts once and
    ends with the job's exit status."""
    job = tmp_path / "job.py"
    job.write_text(JOB_CATASTROPHIC)
    # a sample interval of 20 s: the parser gets up to that after the job's exit to finish (the
    # ten timed-out lines take about half a second of it, more on a loaded machine)
    proc = subprocess.run(costctl_cmd("watch", "--on-exit", "leave", "--loss-regex", CATASTROPHIC, "--",
                                      sys.executable, str(job)),
                          env=costctl_env(tmp_path / "data", COSTCTL_WATCH__SAMPLE_INTERVAL="20s"), cwd=tmp_path,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 3, err
    assert out.count("x" * 3000) == 25 and "step 24 loss: 0.040" in out and "job done" in out
    assert "Traceback" not in err
    assert err.count("--loss-regex took longer than 50 ms on a line of the job's output") == 1, err
    assert err.count(f"--loss-regex timed out on {MAX_TIMEOUTS} lines of the job's output and is turned off") == 1


def test_output_progress_shares_one_user_regex_between_stdout_and_stderr():
    output = OutputProgress(CATASTROPHIC)
    assert output.user_regex is not None
    assert all(p.user_regex is output.user_regex for p in output.parsers.values())


# -- 2. a list-valued setting given no JSON list -----------------------------------------------------
@pytest.mark.parametrize("value", ["notjson", "json://secret-token@host/x", "[1"])
def test_env_notify_urls_not_a_json_list_names_the_variable_hides_the_value_and_says_a_json_list(
        tmp_path, monkeypatch, value):
    monkeypatch.setenv("COSTCTL_NOTIFY__URLS", value)
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    message = info.value.message
    assert message.startswith("environment variable COSTCTL_NOTIFY__URLS = (hidden): expected a JSON list"), message
    assert value not in message and "secret" not in message and "EnvSettingsSource" not in message


def test_env_list_setting_not_json_quotes_a_value_that_is_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_NOTIFY__EVENTS", "stop-done")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert info.value.message.startswith(
        "environment variable COSTCTL_NOTIFY__EVENTS = 'stop-done': expected a JSON list, like "
        "COSTCTL_NOTIFY__EVENTS='[\"a\", \"b\"]'")


def test_env_notify_table_not_json_hides_its_value(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_NOTIFY", "urls=json://token@host")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert info.value.message.startswith("environment variable COSTCTL_NOTIFY = (hidden): expected a JSON object")
    assert "token" not in info.value.message


# -- 3. a GPU log that is empty or garbage -----------------------------------------------------------
def test_analyze_gpu_log_empty_file_is_one_line_naming_the_file_and_the_gpu_logs_read(tmp_path, capsys):
    for text in ("", "\n \n\t\n"):
        empty = tmp_path / "gpu.csv"
        empty.write_text(text)
        line = _analyze_error(capsys, "--gpu-log", str(empty))
        assert line == (f"costctl: {empty} is empty: expected a GPU log (an nvidia-smi --query-gpu CSV, the "
                        "nvidia-smi table printed in a loop, or wandb system metrics (JSON lines))")


def test_analyze_gpu_log_garbage_is_not_called_a_training_log(tmp_path, capsys):
    garbage = tmp_path / "gpu.bin"
    garbage.write_bytes(bytes(range(256)) * 20)
    line = _analyze_error(capsys, "--gpu-log", str(garbage))
    assert line.startswith(f"costctl: {garbage}: not a GPU log costctl reads (its first line: ")
    assert "training log" not in line and line.endswith("or wandb system metrics (JSON lines)")
    text = tmp_path / "notes.txt"
    text.write_text("hello world\nnothing here\n")
    assert _analyze_error(capsys, "--gpu-log", str(text)).startswith(
        f"costctl: {text}: not a GPU log costctl reads (its first line: 'hello world'); expected an nvidia-smi")


def test_analyze_gpu_log_that_shows_losses_is_still_called_a_training_log(tmp_path, capsys):
    console = tmp_path / "train.log"
    console.write_text("step 1 loss: 0.9\nstep 2 loss: 0.8\n")
    assert "looks like a training log (console), not a GPU log; pass it with --train-log" in _analyze_error(
        capsys, "--gpu-log", str(console))


# -- 4. one record of a trainer_state.json nested 2,000 deep -------------------------------------------
def _trainer_state(deep_at: int, records: int = 20) -> str:
    entries = [json.dumps({"loss": 1 / (i + 1), "step": 10 * (i + 1), "epoch": (i + 1) / 10}) for i in range(records)]
    entries.insert(deep_at, '{"loss": 0.3, "step": 55, "x": ' + "[" * 2000 + "]" * 2000 + "}")
    return '{"global_step": 200, "log_history": [' + ", ".join(entries) + '], "max_steps": 200}'


def test_analyze_trainer_state_with_one_record_nested_2000_deep_skips_it_counted_and_reads_the_rest(
        tmp_path, capsys):
    state = tmp_path / "trainer_state.json"
    state.write_text(_trainer_state(5))
    d = _analyze_json(capsys, "--train-log", str(state))["train_log"]
    assert d["format"] == "hf-trainer-state" and d["train_points"] == 20 and d["records_skipped"] == 1


def test_loads_skipping_deep_leaves_out_only_the_deep_element():
    doc, skipped = loads_skipping_deep(_trainer_state(0, records=3))
    assert skipped == 1 and [e["step"] for e in doc["log_history"]] == [10, 20, 30] and doc["max_steps"] == 200
    doc, skipped = loads_skipping_deep('{"log_history": [{"s": "]] \\" [{", "x": ' + "[" * 3000 + "]" * 3000
                                       + '}, {"loss": 1}]}')
    assert skipped == 1 and doc == {"log_history": [{"loss": 1}]}  # brackets inside strings stepped over
    assert loads_skipping_deep('{"a": 1}') == ({"a": 1}, 0)
    with pytest.raises(ValueError):
        loads_skipping_deep('{"log_history": [' + "[" * 3000)  # never closes: not JSON
    with pytest.raises(JsonTooDeep):
        loads_skipping_deep("[" * 3000 + "]" * 3000, levels=0)


# -- 5. a control character inside a number ------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_a_nul_inside_a_number_is_no_number_skipped_and_counted_never_spliced(engine):
    parser = LineParser(engine=engine)
    data = (b"loss: 0.5\nloss: 0.\x0025\nstep 1\x002 loss: 0.3\nloss: 1e\x00-3\n"
            b"loss: 0.4\x08\x08\x08\nloss: 0.2\x00 acc: 0.9\n")
    batch = parser.feed_batch(data, 0.0)
    assert list(batch.values) == [0.5, 0.4, 0.2]  # never 0.25, a step of 12 or 1e-3
    assert parser.split_numbers == 3


def test_a_nul_inside_a_number_is_not_matched_by_a_user_regex_either():
    parser = LineParser(r"loss: (?P<loss>[\d.]+)")
    batch = parser.feed_batch("loss: 0.5\nloss: 0.\x0025\n", 0.0)
    assert list(batch.values) == [0.5] and parser.split_numbers == 1


def test_clean_line_reads_a_split_number_line_as_nothing_and_still_removes_other_controls():
    assert clean_line("loss: 0.\x0025") == ""
    assert clean_line("loss: 0.\x1b[0m\x0025") == ""  # the escape removed first: still inside the number
    assert clean_line("lo\x08ss: 1") == "loss: 1" and clean_line("loss: 0.5\x08\x08") == "loss: 0.5"


def test_analyze_console_log_with_a_nul_inside_a_number_counts_the_skipped_line(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_bytes(b"loss: 0.5\nloss: 0.\x0025\nloss: 0.4\n")
    d = _analyze_json(capsys, "--train-log", str(log))["train_log"]
    assert d["train_points"] == 2 and d["split_number_lines_skipped"] == 1
    assert d["series"][0]["min"] == 0.4


# -- 6. minor ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("written", ["1e400", "-1e400", "1E+400"])
def test_config_float_past_the_range_is_echoed_as_written_not_inf(tmp_path, written):
    path = tmp_path / "off.toml"
    path.write_text(f"[policies.idle]\nmin_gpu_utilization = {written}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.message == f"{path}: policies.idle.min_gpu_utilization = {written}: expected a number from 0 to 100"


@pytest.mark.parametrize("text", ["1_000", "1_0.5", "١٠٠٠"])
def test_money_with_digit_grouping_underscores_or_non_ascii_digits_is_no_amount(text):
    with pytest.raises(AmountError) as info:
        bounded_amount(text, what="--price")
    assert info.value.message.startswith(f"--price: {text!r} is not a number; expected an amount of money")
    assert bounded_amount("1000") == 1000


def test_analyze_price_1_000_is_refused(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("loss: 0.5\n")
    assert "--price '1_000'" in _analyze_error(capsys, "--train-log", str(log), "--price", "1_000")


def test_duration_with_digit_grouping_underscores_is_refused(tmp_path):
    path = tmp_path / "off.toml"
    path.write_text('[policies.idle]\ntime_window = "1_000"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "time_window = '1_000': expected a duration" in info.value.message


def test_a_directory_named_costctl_toml_is_one_line_exit_2_given_or_found(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "costctl.toml"
    folder.mkdir()
    with pytest.raises(ConfigError) as info:
        find_config_file(None, cwd=tmp_path)
    assert info.value.message.startswith(f"{folder} is not a file: costctl reads its config from a TOML file")
    with pytest.raises(ConfigError) as info:
        find_config_file(folder)
    assert info.value.message == f"config file {folder} is a directory; expected a TOML file (`costctl init` writes one)"
    monkeypatch.chdir(tmp_path)
    assert main(["bill"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"costctl: {folder} is not a file") and len(err.strip().splitlines()) == 1


def test_bill_on_the_never_created_default_ledger_creates_nothing(tmp_path, capsys):
    """The default data dir (platformdirs' user data dir, under the test's XDG_DATA_HOME) stays
    absent: the empty report, exit 0."""
    import platformdirs

    data = Path(platformdirs.user_data_dir("costctl"))
    assert not data.exists()
    for args in (["bill"], ["bill", "--format", "json"], ["bill", "--format", "csv"]):
        assert main(args) == 0
        capsys.readouterr()
        assert not data.exists()


def test_control_characters_in_a_path_are_shown_escaped_in_an_error(tmp_path, capsys):
    missing = tmp_path / "run\x1b[31m\x07.log"
    assert main(["analyze", "--train-log", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert "run\\x1b[31m\\x07.log" in err
    assert escape_controls("a\tb\nc\u202e") == "a\\tb\\nc\\u202e" and escape_controls("plain é") == "plain é"


def test_a_400_digit_step_in_a_json_metrics_file_is_skipped_counted_and_step_rate_places_the_rest(
        tmp_path, capsys):
    records = [json.dumps({"loss": 1 / (i + 1), "step": 10 * i}) for i in range(20)]
    records.insert(3, '{"loss": 0.3, "step": ' + "9" * 400 + "}")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(records) + "\n")
    start = datetime(2026, 1, 1, tzinfo=timezone.utc).isoformat()
    d = _analyze_json(capsys, "--train-log", str(metrics), "--step-rate", "1", "--start-time", start)["train_log"]
    assert d["train_points"] == 20 and d["bad_step_records_skipped"] == 1
    assert d["x_axis"] == "step" and d["placed_on_time_axis"] == "start+rate"
