"""Issue 17, the second trial's findings ("Nothing a user types crashes it"): each a named regression test.

1. A FIFO or a device named as a file costctl reads (``analyze --gpu-log/--train-log``, ``gpus
   --import``, ``recommend --config-json``, the config file) blocked the open forever; a FIFO as
   a watch's ``--metrics-file`` hung the watch after its job ended. Now a user-named file is
   checked with ``os.stat`` first (costctl.validation.require_regular_file: one line, exit 2)
   and the metrics follower opens non-blocking and skips anything not a regular file.
2. A command argument (or a data dir / ``--db`` path) that is not valid UTF-8 crashed the ledger
   write: the ledger's engine escapes such text (``\\xff``) in every statement, the job starts;
   an unusable database path is one line.
3. A path component past 255 bytes (a time zone name, a data dir, ``--db``, ``init PATH``,
   ``COSTCTL_CONFIG``) was an internal error, and the crash log could not be written either: an
   OSError on a named path is one line naming it, and the crash writer never raises.
4. JSON nested 3,000 deep in ``COSTCTL_*`` variables or ``--config-json``: one line naming it.
5. Date options: out-of-range values and basic-format digit strings are one line naming the option.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from costctl.cli import main as cli_main
from costctl.cli.main import main
from costctl.progress.metrics_file import MetricsFileFollower
from costctl.validation import escape_controls, shown_path
from helpers import REPO, costctl_cmd, costctl_env

LONG = "a" * 300  # one path component past NAME_MAX (255 bytes)
DEEP = "[" * 3000 + "]" * 3000


def _one_line_error(capsys, args: list[str], code: int = 2) -> str:
    got = main(args)
    out, err = capsys.readouterr()
    assert got == code, (got, err)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    """A FIFO nobody writes to; should a reader block opening it, a writer comes after 20 s so
    that the test fails instead of hanging."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        if not done.wait(20):
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)

    threading.Thread(target=unblock, daemon=True).start()
    yield path
    done.set()


# --- 1. FIFOs and devices --------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["analyze", "--gpu-log", "{fifo}", "--price", "2"],
    ["analyze", "--train-log", "{fifo}", "--price", "2"],
    ["gpus", "--offline", "--import", "{fifo}"],
    ["recommend", "--offline", "--config-json", "{fifo}"],
], ids=["gpu-log", "train-log", "gpus-import", "config-json"])
def test_a_fifo_named_as_an_input_file_is_refused_without_opening_it(capsys, fifo, args):
    line = _one_line_error(capsys, [a.format(fifo=fifo) for a in args])
    assert line == f"costctl: {fifo} is a FIFO, expected a regular file"


def test_a_device_as_train_log_is_refused(capsys, tmp_path):
    line = _one_line_error(capsys, ["analyze", "--train-log", "/dev/zero", "--price", "2"])
    assert line == "costctl: /dev/zero is a device, expected a regular file"


def test_a_fifo_as_the_config_file_is_refused(capsys, fifo, monkeypatch):
    monkeypatch.setenv("COSTCTL_CONFIG", str(fifo))
    line = _one_line_error(capsys, ["bill"])
    assert str(fifo) in line


def test_the_metrics_follower_never_blocks_on_a_fifo(fifo):
    follower = MetricsFileFollower(fifo)
    from datetime import datetime, timezone
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert follower.poll(now) == []
    assert follower.flush(now) == []


def test_a_watch_with_a_fifo_metrics_file_ends_with_its_job_and_honours_sigterm(tmp_path, fifo):
    env = costctl_env(tmp_path / "data")
    done = subprocess.run(costctl_cmd("watch", "--metrics-file", str(fifo), "--on-exit", "leave", "--",
                                      sys.executable, "-c", "pass"),
                          env=env, cwd=REPO, capture_output=True, timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()
    db = sqlite3.connect(tmp_path / "data" / "costctl.db")
    assert db.execute("select status from runs").fetchall() == [("completed",)]
    db.close()

    proc = subprocess.Popen(costctl_cmd("watch", "--metrics-file", str(fifo), "--on-exit", "leave", "--",
                                        sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"),
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:  # the job is up: the watch's main loop runs
            if raw.strip() == b"up":
                break
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    db = sqlite3.connect(tmp_path / "data" / "costctl.db")
    statuses = [s for (s,) in db.execute("select status from runs order by started_at")]
    db.close()
    assert len(statuses) == 2 and statuses[1] != "running", statuses


# --- 2. bytes that are not UTF-8 ----------------------------------------------------------------

def test_a_non_utf8_command_argument_runs_and_is_stored_escaped(tmp_path):
    env = costctl_env(tmp_path / "data")
    argv = [os.fsencode(a) for a in costctl_cmd("watch", "--on-exit", "leave", "--", "sh", "-c")]
    done = subprocess.run([*argv, b"echo hi; : \xff"], env=env, cwd=REPO, capture_output=True, timeout=90,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert b"hi" in done.stdout
    assert b"internal error" not in done.stderr
    db = sqlite3.connect(tmp_path / "data" / "costctl.db")
    (command,), = db.execute("select command from runs").fetchall()
    db.close()
    assert "\\\\xff" in command  # the JSON text of ["sh", "-c", "echo hi; : \\xff"]


def test_shown_path_and_escape_controls_write_undecodable_bytes_as_hex():
    assert shown_path(os.fsdecode(b"/d\xff/x")) == "/d\\xff/x"
    assert escape_controls(os.fsdecode(b"a\xffb")) == "a\\xffb"


@pytest.mark.parametrize("how", ["data-dir", "db"])
def test_a_non_utf8_database_path_is_one_line(capsys, tmp_path, monkeypatch, how):
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/d\xff")
    if how == "data-dir":
        monkeypatch.setenv("COSTCTL_DATA_DIR", bad)
        args = ["bill"]
    else:
        args = ["bill", "--db", "sqlite:///" + bad + ".db"]
    line = _one_line_error(capsys, args)
    assert "d\\xff" in line and "not valid UTF-8" in line


# --- 3. path components past 255 bytes ---------------------------------------------------------

def test_an_over_long_time_zone_name_is_a_config_error(capsys, monkeypatch):
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", LONG)
    line = _one_line_error(capsys, ["bill"])
    assert "COSTCTL_WATCH__TIMEZONE" in line and "IANA time zone" in line


@pytest.mark.parametrize("how", ["data-dir", "db", "init", "config"])
def test_an_over_long_path_component_is_one_line_naming_it(capsys, tmp_path, monkeypatch, how):
    long_path = tmp_path / LONG
    args = ["bill"]
    if how == "data-dir":
        monkeypatch.setenv("COSTCTL_DATA_DIR", str(long_path))
    elif how == "db":
        args = ["bill", "--db", f"sqlite:///{long_path}"]
    elif how == "init":
        args = ["init", str(long_path)]
    else:
        monkeypatch.setenv("COSTCTL_CONFIG", str(long_path))
    line = _one_line_error(capsys, args)
    assert LONG in line and ("File name too long" in line or "does not exist" in line), line


def test_the_crash_writer_never_raises(capsys, monkeypatch, tmp_path):
    def boom() -> Path:
        raise OSError(36, "File name too long", str(tmp_path / LONG))

    monkeypatch.setattr("costctl.paths.crash_log_dir", boom)
    assert cli_main._crash(RuntimeError("bug")) == 70
    _, err = capsys.readouterr()
    assert err.strip().splitlines() == ["costctl: internal error: RuntimeError: bug"]


# --- 4. deeply nested JSON ---------------------------------------------------------------------

@pytest.mark.parametrize("variable", ["COSTCTL_POLICIES__IDLE", "COSTCTL_POLICIES", "COSTCTL_NOTIFY__URLS"])
def test_deep_json_in_an_environment_variable_is_one_line_naming_it(capsys, monkeypatch, variable):
    monkeypatch.setenv(variable, DEEP)
    line = _one_line_error(capsys, ["bill"])
    assert line.startswith(f"costctl: environment variable {variable}: JSON nested too deeply"), line


def test_deep_json_in_config_json_is_one_line_naming_the_file(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(DEEP)
    line = _one_line_error(capsys, ["recommend", "--offline", "--config-json", str(path)])
    assert line.startswith(f"costctl: {path}: not a JSON file"), line


# --- 5. date options ---------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--since", "0001-01-01"],
    ["--since", "9999-12-31T23:59:59.999999"],
    ["--since", "0001-01-01T00:00:00+01:00"],
    ["--until", "0001-01-01T00:00:00+01:00"],
    ["--until", "9999-12-31T23:59:59-01:00"],
])
def test_a_date_option_out_of_range_is_one_line_naming_the_range(capsys, monkeypatch, args):
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "Asia/Shanghai")
    line = _one_line_error(capsys, ["bill", *args])
    assert line.startswith(f"costctl: {args[0]} '{args[1]}': outside the allowed range 1970-01-01 00:00 .. "), line


def test_analyze_start_time_out_of_range_is_one_line(capsys):
    line = _one_line_error(capsys, ["analyze", "--train-log", str(REPO / "pyproject.toml"), "--step-rate", "1",
                                    "--start-time", "0001-01-01T00:00:00+01:00"])
    assert line.startswith("costctl: --start-time '0001-01-01T00:00:00+01:00': outside the allowed range"), line


def test_a_basic_format_digit_string_is_no_date(capsys):
    line = _one_line_error(capsys, ["bill", "--since", "1" * 28])
    assert line.startswith("costctl: --since '" + "1" * 28 + "': expected a date (2026-01-31)"), line


def test_date_options_in_range_still_read(capsys, monkeypatch):
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "Asia/Shanghai")
    for args in (["--since", "2026-01-31"], ["--since", "9999-12-31"], ["--until", "2026-01-31T08:00:00Z"]):
        assert main(["bill", *args]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("how", ["--config fifo", "COSTCTL_CONFIG fifo", "--config /dev/zero",
                                 "COSTCTL_CONFIG /dev/zero", "init --force fifo"])
def test_a_fifo_or_device_as_the_config_file_never_hangs_the_real_cli(tmp_path, fifo, how):
    """Re-trial finding: the language is chosen from the config file before click runs (costctl.cli.
    language), and that early read opened a FIFO (blocked) or /dev/zero (ate memory without limit);
    `init --force FIFO` blocked writing. Each is one line, exit 2, in a real child process."""
    target = str(fifo) if "fifo" in how else "/dev/zero"
    env = costctl_env(tmp_path / "data")
    if how.startswith("COSTCTL_CONFIG"):
        env["COSTCTL_CONFIG"] = target
        args = ["bill"]
    elif how.startswith("init"):
        args = ["init", "--force", target]
    else:
        args = ["bill", "--config", target]
    proc = subprocess.run(costctl_cmd(*args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert target in proc.stderr
