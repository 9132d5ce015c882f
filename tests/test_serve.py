"""``costctl serve``: real HTTP against the server on 127.0.0.1 (a free port, in a thread) over a
populated real ledger (SQLite, and PostgreSQL where the suite has one): /metrics parsed back with
prometheus_client's parser, money against ``costctl bill``, the page's sections, redaction,
read-only methods, the token, an empty and an unreadable ledger."""

from __future__ import annotations

import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_support import API_KEY, BEARER, NOTIFY_URL, NOW, SECRETS, bill_json, populate, request, serving

TOKEN = "s3rve-token-0123456789abcdef"


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``{sample name: [(labels, value)]}`` from an exposition, through prometheus_client's parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def families(text: str) -> dict[str, str]:
    """``{family name: type}``."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


# --------------------------------------------------------------------------- /metrics


def test_metrics_parse_back_with_the_bills_money_and_the_live_run(db_url):
    runs = populate(db_url)
    with serving(db_url) as base:
        answer = request(base, "/metrics")
    assert answer.status == 200 and answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = samples(answer.text)
    assert families(answer.text) == {
        "costctl_spend": "counter", "costctl_spend_rate_per_hour": "gauge", "costctl_gpu_utilization_ratio": "gauge",
        "costctl_idle_seconds": "gauge", "costctl_live_runs": "gauge", "costctl_decisions": "counter",
        "costctl_stop_failures": "counter"}

    # Money: one series per (currency, provider, instance), equal to `costctl bill --by instance`
    # (its 6-place decimal strings) within float64's precision; per currency, the bill's totals.
    by_instance = bill_json(db_url, "--by", "instance")
    spend = {(lab["currency"], lab["provider"], lab["instance"]): v for lab, v in got["costctl_spend_total"]}
    assert set(spend) == {(r["currency"], r["provider"], r["instance_id"]) for r in by_instance["rows"]} == {
        ("USD", "vastai", "123456"), ("CNY", "autodl", "abc-uuid")}
    for row in by_instance["rows"]:
        assert spend[(row["currency"], row["provider"], row["instance_id"])] == pytest.approx(
            float(Decimal(row["spend"])), abs=1e-6)
    for currency, total in bill_json(db_url)["totals"].items():
        assert sum(v for (cur, _, _), v in spend.items() if cur == currency) == pytest.approx(float(Decimal(total)),
                                                                                            abs=1e-6)
    assert spend[("USD", "vastai", "123456")] == pytest.approx(float(Decimal("0.45") * (3661 + 600) / 3600))
    assert spend[("CNY", "autodl", "abc-uuid")] == pytest.approx(float(Decimal("2.18") * 1800 / 3600))

    # The live run's instance only (the killed run's heartbeat is 2 h old: not live).
    assert got["costctl_spend_rate_per_hour"] == [({"currency": "CNY", "provider": "autodl", "instance": "abc-uuid"},
                                                   2.18)]
    assert got["costctl_gpu_utilization_ratio"] == [({"provider": "autodl", "instance": "abc-uuid", "gpu": "0"},
                                                     pytest.approx(0.03))]
    # Busy until now-600 s (GPU 88 percent), idle readings since, the newest at now-60 s.
    assert got["costctl_idle_seconds"] == [({"provider": "autodl", "instance": "abc-uuid"}, 540.0)]
    assert got["costctl_live_runs"] == [({}, 1.0)]
    assert sorted((lab["policy"], lab["action"], v) for lab, v in got["costctl_decisions_total"]) == [
        ("budget", "stop", 1.0), ("idle", "advise", 1.0), ("idle", "stop", 1.0)]
    assert got["costctl_stop_failures_total"] == [({}, 1.0)]

    # No run id anywhere: not as a label name, not as a label value, not even a prefix.
    for name, series in got.items():
        for labels, _ in series:
            assert not {"run", "run_id", "run_ids"} & set(labels), name
            for value in labels.values():
                for run_id in (runs.done, runs.killed, runs.live):
                    assert run_id[:8] not in value, (name, labels)
    for run_id in (runs.done, runs.killed, runs.live):
        assert run_id[:8] not in answer.text


def test_metrics_follow_the_openmetrics_accept_header(tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url) as base:
        answer = request(base, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    assert answer.text.rstrip().endswith("# EOF")
    assert "costctl_spend_total{" in answer.text


def test_a_missing_ledger_is_an_empty_page_and_zero_counters_and_nothing_is_created(tmp_path):
    path = tmp_path / "nowhere" / "costctl.db"
    url = f"sqlite:///{path}"
    with serving(url) as base:
        metrics = request(base, "/metrics")
        page = request(base, "/")
    assert metrics.status == 200
    got = samples(metrics.text)
    assert got["costctl_stop_failures_total"] == [({}, 0.0)] and got["costctl_live_runs"] == [({}, 0.0)]
    assert "costctl_spend_total" not in got
    assert page.status == 200 and str(path) in page.text and "Nothing recorded yet" in page.text
    assert not path.exists() and not path.parent.exists()


def test_an_unreadable_ledger_is_a_503_line_and_the_server_stays_up(tmp_path):
    """A ledger at another schema revision (a newer costctl migrated it) and a PostgreSQL server
    that does not answer: 503 with one line naming why; /healthz still answers; once the ledger
    is readable again, so are the metrics."""
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        head = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'f00dcafe1234'")
    with serving(url) as base:
        for path in ("/metrics", "/"):
            answer = request(base, path)
            assert answer.status == 503, path
            assert answer.text.count("\n") == 1 and "f00dcafe1234" in answer.text and "costctl db upgrade" in answer.text
        assert request(base, "/healthz").text == "ok\n"
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": head})
        assert request(base, "/metrics").status == 200
    engine.dispose()

    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with serving(f"postgresql+psycopg://nobody:pw-secret@127.0.0.1:{port}/none") as base:
        answer = request(base, "/metrics")
        assert answer.status == 503 and answer.text.count("\n") == 1
        assert "cannot open the database" in answer.text and "pw-secret" not in answer.text
        assert request(base, "/healthz").status == 200


# --------------------------------------------------------------------------- the page


class _Page(HTMLParser):
    """Element ids, the classes of each ``<svg>``, table rows per table id, ``<polyline>``s per svg id."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.svgs: dict[str, str] = {}
        self.rows: dict[str, int] = {}
        self.lines: dict[str, int] = {}
        self.meta: dict[str, str] = {}
        self.lang = ""
        self._table: list[str] = []
        self._svg: str | None = None
        self._body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "html":
            self.lang = a.get("lang", "")
        if tag == "meta" and "name" in a:
            self.meta[a["name"]] = a.get("content", "")
        if tag == "svg":
            self._svg = a.get("id", "")
            self.svgs[self._svg] = a.get("class", "")
        if tag == "polyline" and self._svg is not None:
            self.lines[self._svg] = self.lines.get(self._svg, 0) + 1
        if tag == "table":
            self._table.append(a.get("id", ""))
        if tag == "tbody":
            self._body = True
        if tag == "tr" and self._table and self._body:
            self.rows[self._table[-1]] = self.rows.get(self._table[-1], 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None
        if tag == "table" and self._table:
            self._table.pop()
        if tag == "tbody":
            self._body = False


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def test_the_page_shows_charts_runs_live_runs_decisions_and_instances(db_url):
    runs = populate(db_url)
    with serving(db_url) as base:
        answer = request(base, "/")
    assert answer.status == 200 and answer.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src" not in answer.headers["content-security-policy"]
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    page = parse(answer.text)
    assert page.meta["viewport"].startswith("width=device-width")
    # One chart per currency, per instance and per run; each a spend-chart with its lines.
    assert {k: v for k, v in page.svgs.items()} == {
        "spend-by-instance-CNY": "spend-chart", "spend-by-instance-USD": "spend-chart",
        "spend-by-run-CNY": "spend-chart", "spend-by-run-USD": "spend-chart"}
    assert page.lines == {"spend-by-instance-CNY": 1, "spend-by-instance-USD": 1, "spend-by-run-CNY": 1,
                          "spend-by-run-USD": 2}
    assert page.rows == {"live-runs": 2, "runs": 3, "decisions": 3, "instances": 2}
    text = answer.text
    # The live run's status line: elapsed, spend, newest reading, newest loss, idle, heartbeat.
    live_row = re.search(rf"<td>{runs.live[:8]}</td>.*?</tr>", text, re.S).group(0)
    assert "0:30:20 | CN¥1.09 | GPU0 3%, CPU 2% | loss 1 | read idle for 0:09:00 | heartbeat 0:00:20 ago" in live_row
    killed_row = re.search(rf'<tr class="stale"><td>{runs.killed[:8]}</td>.*?</tr>', text, re.S).group(0)
    assert "no heartbeat for 2:00:00: its watch may be gone" in killed_row
    # Times in [watch] timezone, to the second; money per currency, as the language writes it
    # (spend to the cent as `costctl bill` shows it; prices per hour as every command shows them).
    assert "2026-03-01 22:00:00" in text  # the done run's start, 14:00 UTC in Asia/Shanghai
    assert "$0.53" in text and "CN¥1.09" in text and "0.53 USD" not in text and "1.09 CNY" not in text
    assert "$0.45/h" in text
    assert "stop: confirmed" in text and "stop: failed" in text
    assert "`costctl fleet` lists every instance the configured provider accounts report" in text
    assert "will list" not in text  # the command exists: the note does not promise it


def test_decision_evidence_reason_and_outcome_are_redacted(tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    # The server knows the notify URL (its secrets come from the settings); the bearer token and
    # the key's value are masked by their shape and their key, known or not.
    from costctl.notify.redact import url_secrets

    with serving(url, secrets=tuple(url_secrets(NOTIFY_URL))) as base:
        page = request(base, "/").text
    for secret in SECRETS:
        assert secret not in page
    assert API_KEY not in page and BEARER not in page
    assert "&#34;api_key&#34;: &#34;****&#34;" in page
    assert "Authorization: Bearer ****" in page
    assert "&#34;samples&#34;: 8" in page  # the rest of the evidence is shown as recorded


def test_the_redactor_masks_known_secrets_shapes_and_keys():
    from costctl.serve.redaction import Redactor

    r = Redactor(["hunter2-known"])
    assert r.text("pw hunter2-known, Bearer abc.def, ?token=xyz&a=1, postgres://u:pa55@h/db") == \
        "pw ****, Bearer ****, ?token=****&a=1, postgres://u:****@h/db"
    assert r.value({"key": "idle:2026", "Password": "p", "nested": [{"webhook": "https://h/x"}], "n": 3}) == \
        {"key": "idle:2026", "Password": "****", "nested": [{"webhook": "****"}], "n": 3}


def test_known_secrets_come_from_the_settings_and_the_credential_variables(tmp_path, monkeypatch):
    from costctl.config import load_settings
    from costctl.serve.redaction import known_secrets

    config = tmp_path / "costctl.toml"
    config.write_text('[notify]\nurls = ["json://127.0.0.1:9/hook/cfg-notify-token"]\n'
                      '[serve]\ntoken = "cfg-serve-token-0123456789"\n'
                      '[providers.vastai]\napi_key = "cfg-vast-key-abc"\n')
    monkeypatch.setenv("AUTODL_TOKEN", "env-autodl-tok")
    monkeypatch.setenv("HF_HUB_DISABLE_TOKEN", "1")
    found = known_secrets(load_settings(config))
    for secret in ("cfg-notify-token", "cfg-serve-token-0123456789", "cfg-vast-key-abc", "env-autodl-tok"):
        assert secret in found
    assert "1" not in found


# --------------------------------------------------------------------------- HTTP rules


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head_are_served(tmp_path, method):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url) as base:
        for path in ("/", "/metrics"):
            answer = request(base, path, method=method, data=b"x" if method in ("POST", "PUT", "PATCH") else None)
            assert answer.status == 405 and answer.headers["allow"] == "GET, HEAD"
            assert answer.text.count("\n") == 1 and "read-only" in answer.text


def test_head_has_the_headers_and_no_body(tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url) as base:
        get, head = request(base, "/metrics"), request(base, "/metrics", method="HEAD")
        assert head.status == 200 and head.body == b""
        assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.body))
        assert request(base, "/nowhere").status == 404


def test_a_token_is_required_when_set(tmp_path):
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url, token=TOKEN) as base:
        for path in ("/", "/metrics", "/healthz"):
            denied = request(base, path)
            assert denied.status == 401 and denied.headers["www-authenticate"].startswith("Bearer")
            assert TOKEN not in denied.text
        assert request(base, "/metrics", headers={"Authorization": "Bearer wrong-token-0123456789ab"}).status == 401
        assert request(base, f"/metrics?token={TOKEN[:-1]}").status == 401
        assert request(base, "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
        page = request(base, f"/?token={TOKEN}")
        assert page.status == 200 and TOKEN not in page.text
        assert page.headers["referrer-policy"] == "no-referrer"


def test_a_bug_is_a_500_line_with_a_crash_log_and_the_server_stays_up(tmp_path):
    """The instances table's source (the seam costctl fleet will fill) raising: one line naming
    the error and the crash log, its secret masked; the metrics still answer."""
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)

    def broken(conn):
        raise RuntimeError(f"fleet exploded with Bearer {BEARER}\nsecond line")

    with serving(url, instances=broken) as base:
        answer = request(base, "/")
        assert answer.status == 500 and answer.text.count("\n") == 1
        assert "RuntimeError: fleet exploded" in answer.text and "traceback in" in answer.text
        assert BEARER not in answer.text and "second line" not in answer.text
        assert request(base, "/metrics").status == 200


def test_concurrent_scrapes_and_pages_are_all_answered(tmp_path):
    """The server's threads share one engine: 16 requests at once, every one answered in full."""
    from concurrent.futures import ThreadPoolExecutor

    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    with serving(url) as base, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda path: request(base, path), ["/metrics", "/"] * 8))
    assert [a.status for a in answers] == [200] * 16
    assert len({a.body for a in answers[0::2]}) == 1 and len({a.body for a in answers[1::2]}) == 1


def test_the_live_heartbeat_rule_is_the_watchs():
    from costctl.serve.data import HEARTBEAT_STALE_S
    from costctl.watch.chainlock import HEARTBEAT_STALE_S as WATCH_RULE

    assert HEARTBEAT_STALE_S == WATCH_RULE


def test_spend_series_per_run_sum_to_the_runs_spend(tmp_path):
    """The per-run chart's series end at each run's spend (run_page's), per currency."""
    from costctl.ledger.queries import run_page
    from costctl.ledger.reader import LedgerReader
    from costctl.ledger.timeline import spend_series

    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    runs = populate(url)
    with LedgerReader.open(url) as reader, reader.connection() as conn:
        series = spend_series(conn, by="run")
        rows = run_page(conn, limit=None, now=NOW).rows
        only = spend_series(conn, by="run", run_ids=[runs.live])
    ends = {(s.run_id, s.currency): s.amounts[-1] for s in series}
    assert ends == {(r.run_id, r.currency): r.spend for r in rows if r.spend}
    assert [(s.run_id, s.currency) for s in only] == [(runs.live, "CNY")]
    assert all(s.label.startswith(s.run_id[:8]) for s in series)
