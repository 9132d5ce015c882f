"""``costctl serve`` as a real child process: the bind rule (a token, or --behind-proxy, for any
address that is not loopback), the URL it prints, SIGTERM, and the page in Chinese."""

from __future__ import annotations

import pytest

from helpers import costctl_env, run_costctl
from serve_support import TOKEN_ENV_VALUE, populate, request, serve_child


@pytest.fixture
def env(tmp_path):
    return costctl_env(tmp_path / "data", LANG="C")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_a_non_loopback_bind_needs_a_token_or_a_proxy(env, host):
    done = run_costctl("serve", "--host", host, "--port", "0", env=env, timeout=60)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--host {host} is not a loopback address" in err and "--token" in err and "--behind-proxy" in err


def test_a_short_token_is_refused(env):
    done = run_costctl("serve", "--token", "short", "--port", "0", env=env, timeout=60)
    assert done.returncode == 2 and "at least 16" in done.stderr.decode()
    assert done.stderr.decode().count("\n") == 1


@pytest.mark.parametrize("token, says", [
    (" " * 16, "contains whitespace"),
    ("\t" * 20, "contains whitespace"),
    ("abcdefgh ijklmnop", "contains whitespace"),
    ("a" * 32, "only 1 different characters"),
    ("abababababababab", "only 2 different characters"),
])
def test_a_weak_token_from_the_environment_is_refused_in_one_line(env, token, says):
    """Issue 18: sixteen spaces in COSTCTL_SERVE__TOKEN were accepted as a token."""
    done = run_costctl("serve", "--host", "0.0.0.0", "--port", "0", env={**env, "COSTCTL_SERVE__TOKEN": token},
                       timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_port_is_one_line(env):
    done = run_costctl("serve", "--port", "70000", env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()


def test_loopback_serves_without_a_token_and_sigterm_ends_it(env, tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serve_child("--port", "0", "--db", url, env=env) as (proc, base):
        assert base.startswith("http://127.0.0.1:")
        answer = request(base, "/metrics")
        assert answer.status == 200 and "costctl_spend_total{" in answer.text
        page = request(base, "/")
        assert page.status == 200 and 'id="runs"' in page.text and 'class="spend-chart"' in page.text
    assert proc.returncode == 0, proc.stderr_text
    assert "serve stopped" in proc.stderr_text


def test_a_token_from_the_environment_opens_a_non_loopback_bind(env, tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    env = {**env, "COSTCTL_SERVE__TOKEN": TOKEN_ENV_VALUE}
    with serve_child("--host", "0.0.0.0", "--port", "0", "--db", url, env=env) as (proc, base):
        base = base.replace("0.0.0.0", "127.0.0.1")
        assert request(base, "/metrics").status == 401
        assert request(base, "/metrics", headers={"Authorization": f"Bearer {TOKEN_ENV_VALUE}"}).status == 200
    assert proc.returncode == 0
    assert TOKEN_ENV_VALUE not in proc.stderr_text


def test_behind_proxy_opens_a_non_loopback_bind_without_a_token(env, tmp_path):
    with serve_child("--host", "0.0.0.0", "--port", "0", "--behind-proxy", env=env) as (proc, base):
        answer = request(base.replace("0.0.0.0", "127.0.0.1"), "/")
        assert answer.status == 200 and "Nothing recorded yet" in answer.text
    assert proc.returncode == 0
    assert not (tmp_path / "data" / "costctl.db").exists()


def test_the_page_is_in_chinese_under_a_chinese_locale(tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    env = costctl_env(tmp_path / "data", LANG="zh_CN.UTF-8")
    with serve_child("--port", "0", "--db", url, env=env) as (proc, base):
        page = request(base, "/").text
        metrics = request(base, "/metrics").text
    assert '<html lang="zh-CN">' in page
    for heading in ("实时运行", "决策", "实例"):
        assert heading in page
    assert "Live runs" not in page
    # Metric names and help stay English: an interface for dashboards and alerts.
    assert "# HELP costctl_spend_total Money charged per instance" in metrics
    assert proc.returncode == 0
