"""SSH session counting: the process-title heuristic on real processes, utmp filtering."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import namedtuple

import psutil
import pytest

from costctl.records import SignalStatus
from costctl.telemetry.ssh import (
    count_ssh_sessions,
    is_ssh_session_cmdline,
    remote_logins,
    SshSessionCounter,
    ssh_session_pids,
)

# The shape of psutil.users() entries (psutil's ``suser``).
User = namedtuple("User", "name terminal host started pid")


@pytest.mark.parametrize(
    "title",
    ["sshd: alice@pts/0", "sshd: alice@notty", "sshd-session: bob@pts/3", "sshd: root@pts/12  "],
)
def test_session_titles_count(title):
    assert is_ssh_session_cmdline([title])


@pytest.mark.parametrize(
    "title",
    [
        "sshd: alice [priv]",
        "sshd: unknown [net]",
        "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups",
        "/usr/sbin/sshd -D",
        "sshd-session: alice [priv]",
        "ssh alice@example.org",
        "",
    ],
)
def test_listener_and_helpers_do_not_count(title):
    assert not is_ssh_session_cmdline([title])
    assert not is_ssh_session_cmdline([])


def test_a_real_process_titled_like_an_sshd_session_is_found(tmp_path):
    # `exec -a` sets argv[0], which is what sshd's process title rewrite shows in /proc/PID/cmdline;
    # run through a link named sshd, so its /proc/PID/comm is "sshd", as a real sshd's is (only
    # processes so named have their command line read).
    sshd = tmp_path / "sshd"
    sshd.symlink_to(shutil.which("sleep"))
    proc = subprocess.Popen(["bash", "-c", f'exec -a "sshd: alice@pts/7" {sshd} 30'])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if psutil.Process(proc.pid).cmdline()[:1] == ["sshd: alice@pts/7"]:
                    break
            except psutil.Error:
                pass
            time.sleep(0.01)
        assert proc.pid in ssh_session_pids()
        status, count, error = count_ssh_sessions()
        assert status is SignalStatus.OK and error is None
        assert count >= 1
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in ssh_session_pids()


def test_utmp_entries_from_remote_hosts_only():
    users = [
        User("alice", "pts/0", "203.0.113.7", 1.0, 100),
        User("bob", "pts/1", "127.0.0.1", 1.0, 101),  # through a tunnel: still SSH
        User("carol", "tty1", "", 1.0, 102),  # console login
        User("dave", ":0", ":0", 1.0, 103),  # X display
        User("erin", "pts/2", "tmux(4242).%0", 1.0, 104),  # tmux pane
    ]
    assert [u.name for u in remote_logins(users)] == ["alice", "bob"]


def test_count_is_the_larger_heuristic_and_errors_only_when_both_fail():
    users = [User("alice", "pts/0", "203.0.113.7", 1.0, 100)]

    def broken():
        raise OSError("utmp unreadable")

    assert count_ssh_sessions(users=lambda: users, processes=lambda: []) == (SignalStatus.OK, 1, None)
    status, count, _ = count_ssh_sessions(users=broken, processes=lambda: [])
    assert (status, count) == (SignalStatus.OK, 0)
    status, count, error = count_ssh_sessions(users=broken, processes=broken)
    assert status is SignalStatus.ERROR and count is None
    assert "utmp unreadable" in error


def test_a_process_titled_like_a_session_but_not_named_sshd_is_not_read():
    # Only /proc/PID/comm of most processes is read: a program that merely calls itself
    # "sshd: ..." in argv[0] (its comm is its own name) is not an SSH session.
    proc = subprocess.Popen(["bash", "-c", 'exec -a "sshd: mallory@pts/9" sleep 30'])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if psutil.Process(proc.pid).cmdline()[:1] == ["sshd: mallory@pts/9"]:
                    break
            except psutil.Error:
                pass
            time.sleep(0.01)
        assert proc.pid not in ssh_session_pids()
    finally:
        proc.kill()
        proc.wait()


def test_samples_a_second_apart_share_one_scan_and_a_later_one_rescans():
    from costctl.telemetry.sampler import Sampler
    from datetime import datetime, timezone

    scans = []
    t = [1000.0]

    def scan():
        scans.append(t[0])
        return SignalStatus.OK, len(scans), None

    sampler = Sampler(None, None, count_ssh=True, ssh_counter=SshSessionCounter(scan, clock=lambda: t[0]))
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    first = sampler.sample(now)
    t[0] += 1.0
    second = sampler.sample(now)
    assert scans == [1000.0] and first.ssh_sessions == second.ssh_sessions == 1
    t[0] += 58.0  # 59 s after the scan: still the same count (the idle windows are minutes)
    assert sampler.sample(now).ssh_sessions == 1 and len(scans) == 1
    t[0] += 1.0  # SSH_RESCAN_S (60 s) after the scan: a new one
    assert sampler.sample(now).ssh_sessions == 2 and len(scans) == 2


def test_the_default_sampler_caches_its_ssh_count():
    from costctl.telemetry.sampler import Sampler

    assert isinstance(Sampler(None, None, count_ssh=True)._ssh_counter, SshSessionCounter)
