"""SSH session counting: the process-title heuristic on real processes, utmp filtering."""

from __future__ import annotations

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


def test_a_real_process_titled_like_an_sshd_session_is_found():
    # `exec -a` sets argv[0], which is what sshd's process title rewrite shows in /proc/PID/cmdline.
    proc = subprocess.Popen(["bash", "-c", 'exec -a "sshd: alice@pts/7" sleep 30'])
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
