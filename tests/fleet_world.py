"""The fake provider world `costctl fleet`'s and `costctl patrol`'s CLI tests share (one copy;
tests/test_fleet_cli.py and tests/test_patrol_cli.py build their fixtures on it).

* :func:`isolate`: a tmp data dir (``COSTCTL_DATA_DIR``), no other ``COSTCTL_*`` variable, the
  credentials of the Vast default and team accounts, RunPod and AutoDL, and a tmp work dir as
  the current directory (the config file's home);
* :func:`fakes`: the three local fake provider servers (real HTTP on 127.0.0.1), the Vast fake
  taking both Vast keys;
* :func:`providers_toml`: ``[instance]`` (the sim) and the ``[providers.*]`` tables pointing at
  the fakes, no retries, short timeouts, and the Vast ``team`` account;
* :func:`run_cli`: ``costctl ARGV`` in process, its output, and the check that no secret of the
  world appears in it.

Each test module seeds its own instances (they are what its assertions are about).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl.cli.main import main
from tests.fakes.autodl import TOKEN as AUTODL_TOKEN, FakeAutoDL
from tests.fakes.runpod import API_KEY as RUNPOD_KEY, FakeRunPod
from tests.fakes.vastai import API_KEY as VAST_KEY, FakeVast

#: The simulated "now" both worlds start at.
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
#: The Vast team account's API key (``[providers.vastai.accounts.team]``, ``VAST_TEAM_KEY``).
TEAM_KEY = "vast-team-key-fedcba9876543210"
#: Every credential of the world: none may appear in any output.
SECRETS = (VAST_KEY, TEAM_KEY, RUNPOD_KEY, AUTODL_TOKEN)
#: What each provider adapter sends over HTTP: no retries, fast backoff.
HTTP = 'retries = 0\nbackoff = 0.01\n'


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Point costctl at ``tmp_path / "data"``, drop every other ``COSTCTL_*`` variable, set the
    world's credentials, and chdir into a fresh ``tmp_path / "work"``; returns ``(data, work)``."""
    data = tmp_path / "data"
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(data))
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_DATA_DIR":
            monkeypatch.delenv(key)
    monkeypatch.setenv("VAST_API_KEY", VAST_KEY)
    monkeypatch.setenv("VAST_TEAM_KEY", TEAM_KEY)
    monkeypatch.setenv("RUNPOD_API_KEY", RUNPOD_KEY)
    monkeypatch.setenv("AUTODL_TOKEN", AUTODL_TOKEN)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return data, work


@contextmanager
def fakes() -> Iterator[tuple[FakeVast, FakeRunPod, FakeAutoDL]]:
    """The Vast (default and team keys), RunPod and AutoDL fake servers, running; no instances."""
    with FakeVast(api_keys=(VAST_KEY, TEAM_KEY)) as vast, FakeRunPod() as runpod, FakeAutoDL() as autodl:
        yield vast, runpod, autodl


def providers_toml(vast: FakeVast, runpod: FakeRunPod, autodl: FakeAutoDL, *, timeout: float = 2,
                   autodl_timeout: float | None = None) -> str:
    """``[instance] provider = "sim"`` and the three fakes' ``[providers.*]`` tables (``timeout``
    seconds each; AutoDL's ``autodl_timeout`` when given), with the Vast ``team`` account."""
    autodl_s = timeout if autodl_timeout is None else autodl_timeout
    return (f'[instance]\nprovider = "sim"\n\n'
            f'[providers.vastai]\nbase_url = "{vast.url}"\n{HTTP}timeout = {timeout}\n\n'
            f'[providers.vastai.accounts.team]\ncredential_env = "VAST_TEAM_KEY"\n\n'
            f'[providers.runpod]\nbase_url = "{runpod.url}"\n{HTTP}timeout = {timeout}\n\n'
            f'[providers.autodl]\nbase_url = "{autodl.url}"\n{HTTP}timeout = {autodl_s}\n\n')


def run_cli(capsys: pytest.CaptureFixture[str], argv: Sequence[str],
            secrets: Sequence[str] = SECRETS) -> tuple[int, str, str]:
    """``costctl ARGV`` in this process: ``(exit status, stdout, stderr)``; asserts that none of
    ``secrets`` was printed."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    for secret in secrets:
        assert secret not in out and secret not in err
    return code, out, err
