"""The parts of notifications (issue 16, part 4): URLs kept secret, the ``[notify]`` settings,
the sender child (Apprise, AutoDL's WeChat push) against a local webhook, the notifier's
de-duplication, rate limit and per-URL events, and the warning before a stop."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costctl.config import NOTIFY_EVENTS, NotifyConfig, load_settings
from costctl.errors import ConfigError
from costctl.notify.dispatch import Notifier
from costctl.notify.events import Context, Event, Message
from costctl.notify.pending import StopWarnings
from costctl.notify.redact import MASK, describe_url, redact, url_secrets
from costctl.policies.base import Pending
from helpers import REPO
from tests.fakes.webhook import FakeWebhook

T0 = datetime(2026, 6, 1, 8, 0, tzinfo=timezone.utc)
JWT = "eyJhbGciOiJFUzI1NiJ9.eyJ1aWQiOjQyfQ.Sg-Ab_Cd"  # a JWT's shape: case and dots matter


# ------------------------------------------------------------------ redaction
@pytest.mark.parametrize(("url", "shown", "secrets"), [
    ("json://127.0.0.1:8080/hook/TOKEN123", "json://127.0.0.1:8080/...", ["TOKEN123"]),
    ("jsons://bot:PASSWORD9@hooks.example.com/x?+Authorization=Bearer%20HDRTOKEN", "jsons://hooks.example.com/...",
     ["PASSWORD9", "HDRTOKEN", "Bearer HDRTOKEN"]),
    ("tgram://123456789:AAHbotTOKEN/4242", "tgram://...", ["123456789", "AAHbotTOKEN"]),
    (f"autodl://{JWT}", "autodl://...", [JWT]),
    ("dingtalk://ACCESSTOKEN42/?secret=SIGNSECRET", "dingtalk://...", ["ACCESSTOKEN42", "SIGNSECRET"]),
    ("ntfy://localhost/mytopicXYZ", "ntfy://localhost/...", ["mytopicXYZ"]),
])
def test_a_url_is_named_without_its_secrets_and_each_secret_is_masked(url, shown, secrets):
    assert describe_url(url) == shown
    found = url_secrets(url)
    text = f"failed for {url}: " + " and ".join(secrets)
    masked = redact(text, found)
    for secret in secrets:
        assert secret not in masked
        assert secret not in shown
    assert MASK in masked


@pytest.mark.parametrize(("url", "words", "secrets"), [
    ("json://127.0.0.1:18998/hook", ["hook"], []),
    ("ntfy://ntfy.sh/train", ["train"], []),
    ("ntfys://ntfy.sh/alerts?priority=high&format=markdown", ["alerts", "high", "markdown", "priority"], []),
    ("json://127.0.0.1:8080/hook/TOKEN123?secret=abcd", ["hook"], ["TOKEN123", "abcd"]),
    ("json://bob:pw42@hooks.example.com/services", ["services", "hooks"], ["pw42"]),
])
def test_only_the_parts_of_a_url_that_can_be_secrets_are_masked(url, words, secrets):
    found = url_secrets(url)
    for word in words:
        assert word not in found
    for secret in secrets:
        assert secret in found
    assert redact("train loss plateaued; webhook_status=ok hook_ran=true; https://hooks.slack.com/x", found) == \
        "train loss plateaued; webhook_status=ok hook_ran=true; https://hooks.slack.com/x"


def test_a_short_known_secret_is_masked_only_as_a_whole_token_a_long_one_anywhere():
    assert redact("pw42 pw420 xpw42 (pw42)", ["pw42"]) == "**** pw420 xpw42 (****)"
    assert redact("Bearer%20LONGTOKEN0123456789", ["LONGTOKEN0123456789"]) == "Bearer%20****"


# ------------------------------------------------------------------ settings
def test_notify_settings_take_plain_urls_and_per_url_events(tmp_path):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[notify]\nurls = ["json://127.0.0.1:9/hook/T1", {url = "autodl://T2", events = ["stop_failed"]}]\n'
                   'warn_before = "2m"\nmax_per_hour = 3\n[snooze]\nmax = "1h"\n')
    s = load_settings(cfg)
    first, second = s.notify.urls
    assert first.events is None and second.events == ["stop_failed"]
    assert second.url.get_secret_value() == "autodl://T2"
    assert s.notify.events == list(NOTIFY_EVENTS) == [e.value for e in Event]
    assert s.notify.warn_before == timedelta(minutes=2) and s.snooze.max == timedelta(hours=1)
    assert "T1" not in repr(s) and "T2" not in json.dumps(s.model_dump(mode="json"))


@pytest.mark.parametrize(("toml", "expect"), [
    ('[notify]\nurls = ["no-scheme-SECRET42"]\n', "notify.urls.0.url = (hidden): expected an Apprise URL"),
    ('[notify]\nurls = [{url = "json://h/SECRET42", events = ["everything"]}]\n', "notify.urls.0.events.0 = (hidden)"),
    ('[notify]\nevents = ["stop_failed", "lunch"]\n', "notify.events.1 = 'lunch'"),
    ('[notify]\nwarn_before = "soon"\n', "notify.warn_before"),
    ('[snooze]\nmax = "forever"\n', "snooze.max"),
])
def test_bad_notify_settings_are_one_line_that_never_quotes_a_url(tmp_path, toml, expect):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert expect in info.value.message and "\n" not in info.value.message
    assert "SECRET42" not in info.value.message


def test_urls_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_NOTIFY__URLS", '["json://127.0.0.1:9/hook/ENVTOKEN"]')
    s = load_settings(None)
    assert [t.url.get_secret_value() for t in s.notify.urls] == ["json://127.0.0.1:9/hook/ENVTOKEN"]


# ------------------------------------------------------------------ the sender child
def _send(request: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "costctl.notify.send"], input=json.dumps(request).encode(),
                          capture_output=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""
    return json.loads(proc.stdout)


def test_the_sender_posts_to_a_json_webhook_and_autodls_wechat_push_and_masks_failures():
    with FakeWebhook() as hook:
        hook.server.inject("POST", "/hook/{token}", __import__("tests.fakes.http", fromlist=["Reply"]).Reply.empty(500))
        urls = [hook.json_url("FAILTOKEN1"), f"autodl://{JWT}@127.0.0.1:{hook.port}?https=no",
                "nosuchservice://SECRETX", hook.json_url("OKTOKEN2")]
        answer = _send({"urls": urls, "title": "t1", "body": "b1", "type": "failure", "name": "costctl run x",
                        "timeout": 10})
        messages = hook.wait_for(2)
    results = answer["results"]
    assert [r["index"] for r in results] == [1, 2, 3, 4]
    # the one injected 500 goes to whichever of the two json:// sends reaches the fake first
    oks = [r["ok"] for r in results]
    assert oks[1] is True and oks[2] is False and sorted([oks[0], oks[3]]) == [False, True]
    failed = results[0] if not oks[0] else results[3]
    assert "500" in failed["detail"] and "nosuchservice://" in results[2]["detail"]
    assert all(s not in json.dumps(answer) for s in ("FAILTOKEN1", JWT, "SECRETX", "OKTOKEN2"))
    push = next(m for m in messages if m["_path"] == "/api/v1/wechat/message/send")
    assert push["_headers"]["Authorization"] == JWT  # as given: no "Bearer", case kept
    assert (push["title"], push["name"], push["content"]) == ("t1", "costctl run x", "b1")


def test_the_sender_reports_an_autodl_refusal_without_the_token():
    from tests.fakes.http import Reply

    with FakeWebhook() as hook:
        hook.server.route("POST", "/api/v1/wechat/message/send",
                          Reply.json({"code": "AuthorizeFailed", "msg": "token invalid"}))
        answer = _send({"urls": [f"autodl://{JWT}@127.0.0.1:{hook.port}?https=no"], "title": "t", "body": "b",
                        "timeout": 10})
    (result,) = answer["results"]
    assert result["ok"] is False and "AuthorizeFailed" in result["detail"] and JWT not in result["detail"]


def test_the_sender_gives_up_on_a_hung_webhook_within_its_timeout():
    with FakeWebhook() as hook:
        hook.hang_s = 60.0
        started = time.monotonic()
        answer = _send({"urls": [hook.json_url("HANGTOKEN")], "title": "t", "body": "b", "timeout": 1})
        took = time.monotonic() - started
    assert answer["results"][0]["ok"] is False
    assert took < 30  # its timeout, not the webhook's minute


def test_an_unreadable_request_is_exit_status_2():
    proc = subprocess.run([sys.executable, "-m", "costctl.notify.send"], input=b"json://not-json",
                          capture_output=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and b"not-json" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------ the notifier
def _ctx() -> Context:
    return Context(provider="sim", instance="box-1", run="abcdef0123", host="vm")


def _msg(key: str, event: Event = Event.ADVICE, minute: int = 0) -> Message:
    return Message(event=event, key=key, title=f"title {key}", body="body", level="info",
                   time=T0 + timedelta(minutes=minute))


def test_the_notifier_sends_each_message_once_within_the_hourly_limit_and_says_what_it_held_back():
    with FakeWebhook() as hook:
        config = NotifyConfig(urls=[hook.json_url("T")], max_per_hour=2)
        said: list[str] = []
        n = Notifier(config, _ctx, say=said.append)
        assert n.post(_msg("a")) is True
        assert n.post(_msg("a", minute=1)) is False  # the same message again
        assert n.post(_msg("b", minute=2)) is True
        assert n.post(_msg("c", minute=3)) is False  # a third in the hour: held back
        assert n.post(_msg("done", Event.STOP_DONE, minute=4)) is True  # a stop's end always goes
        assert n.post(_msg("d", minute=61)) is True  # "a" left the hour
        n.close(wait_s=30)
        messages = hook.wait_for(4)
    assert sorted(m["title"] for m in messages) == ["title a", "title b", "title d", "title done"]
    next_sent = next(m for m in messages if m["title"] == "title done")  # the next one sent says so
    assert "1 earlier notification(s) were not sent: at most 2 go out in an hour" in next_sent["message"]
    assert said == []


def test_each_url_gets_only_its_events():
    with FakeWebhook() as hook:
        config = NotifyConfig.model_validate({"urls": [hook.json_url("ALL"), {"url": hook.json_url("LOUD"),
                                                                               "events": ["stop_failed"]}],
                                              "events": ["advice", "stop_failed"]})
        n = Notifier(config, _ctx, say=lambda s: None)
        assert n.post(_msg("advice")) is True
        assert n.post(_msg("failed", Event.STOP_FAILED)) is True
        assert n.post(_msg("budget", Event.BUDGET)) is False  # nobody takes it
        n.close(wait_s=30)
        messages = hook.wait_for(3)
        time.sleep(0.3)
    got = sorted((m["_path"], m["title"]) for m in hook.messages)
    assert got == [("/hook/ALL", "title advice"), ("/hook/ALL", "title failed"), ("/hook/LOUD", "title failed")]
    assert len(messages) == 3


def test_a_delivery_failure_is_said_with_the_url_named_and_its_token_masked():
    with FakeWebhook() as hook:
        from tests.fakes.http import Reply

        hook.server.inject("POST", "/hook/{token}", Reply.empty(503))
        said: list[str] = []
        n = Notifier(NotifyConfig(urls=[hook.json_url("SAYTOKEN")]), _ctx, say=said.append)
        n.post(_msg("x"))
        n.close(wait_s=30)
    assert len(said) == 1, said
    assert said[0].startswith(f"costctl: notification 'title x' was not delivered to notify URL 1 "
                              f"(json://127.0.0.1:{hook.port}/...): ")
    assert "SAYTOKEN" not in said[0]


# ------------------------------------------------------------------ the warning before a stop
def test_a_pending_stop_is_warned_about_once_warn_before_ahead_and_again_when_it_moved_later():
    w = StopWarnings(timedelta(minutes=5), timezone.utc)
    at = T0 + timedelta(minutes=30)
    pending = Pending(policy="idle", action="stop", at=at, progress="idle 20m of 30m")
    kw = {"provider": "sim", "instance": "box-1", "host": "vm"}
    assert w.check(pending, at - timedelta(minutes=6), **kw) is None  # not yet
    first = w.check(pending, at - timedelta(minutes=5), **kw)
    assert first is not None and first.action == "warn" and first.policy == "idle"
    assert "box-1 will be stopped at 2026-06-01 08:30:00+00:00 (5m from now)" in first.reason
    assert w.check(pending, at - timedelta(minutes=4), **kw) is None  # warned already
    moved = Pending(policy="idle", action="stop", at=at + timedelta(minutes=10), progress="snoozed")
    assert w.check(moved, at + timedelta(minutes=5), **kw) is not None  # a snooze moved it: warned again
    assert w.check(None, at + timedelta(minutes=6), **kw) is None  # it went away
    again = w.check(pending, at - timedelta(minutes=5), **kw)
    assert again is not None  # came back: a new warning
    assert StopWarnings(None, timezone.utc).check(pending, at - timedelta(minutes=1), **kw) is None  # off


def test_the_messages_of_a_watch_arrive_in_the_order_they_were_posted_even_when_the_first_is_slow():
    """Tester finding: "Budget cap reached" arrived after "stopped", job_end after "stopped" (the
    senders ran in parallel and a stop's end jumped the queue). The webhook takes the first
    message slowly: the later ones (a stop's end among them) still arrive after it."""
    with FakeWebhook() as hook:
        def slow_first(req):
            if req.json().get("title") == "title first":
                time.sleep(0.8)  # the first sender is slow to reach the webhook
            return hook._handle(req)

        hook.server.route("POST", "/hook/{token}", slow_first)
        n = Notifier(NotifyConfig(urls=[hook.json_url("ORDER")]), _ctx, say=lambda s: None)
        posted = [("first", Event.JOB_END), ("budget cap", Event.BUDGET), ("done", Event.STOP_DONE),
                  ("failed", Event.STOP_FAILED), ("advice", Event.ADVICE)]
        for minute, (key, event) in enumerate(posted):
            assert n.post(_msg(key, event, minute=minute)) is True
        assert n.flush(60)
        n.close(wait_s=5)
        hook.wait_for(len(posted))
    assert [m["title"] for m in hook.messages] == [f"title {key}" for key, _event in posted]
    chained = n.deliveries[1:]
    assert all(d.after is not None for d in chained)  # each one waited for the one before it


# ------------------------------------------------------------------ what the stop's messages claim
def test_only_a_snoozable_stop_is_warned_about_with_the_snooze_hint():
    w = StopWarnings(timedelta(minutes=5), timezone.utc)
    kw = {"provider": "sim", "instance": "box-1", "host": "vm"}
    at = T0 + timedelta(minutes=30)
    cap = w.check(Pending(policy="budget", action="stop", at=at, progress="USD 0.90 of USD 1.00"),
                  at - timedelta(minutes=4), snoozable=False, **kw)
    assert cap is not None and "costctl snooze" not in cap.reason
    assert cap.reason.endswith("A snooze does not postpone this stop.")
    idle = w.check(Pending(policy="idle", action="stop", at=at, progress="idle 26m of 30m"),
                   at - timedelta(minutes=4), snoozable=True, **kw)
    assert idle is not None and "Run `costctl snooze 1h` on vm to postpone an idle autostop." in idle.reason


def _stop_decision(policy: str, reason: str):
    from costctl.decisions import RecordedDecision
    from costctl.records import Action, Decision

    return RecordedDecision(decision=Decision(time=T0, policy=policy, action=Action.STOP, reason=reason),
                            outcome="stop requested", run_id="abcdef0123", dry_run=False, ledger_id=None)


def test_the_end_of_a_budget_stop_does_not_claim_a_snooze_and_an_idle_stop_says_it():
    from costctl.stopping import StopEvent, StopState

    with FakeWebhook() as hook:
        for policy in ("budget", "idle"):
            n = Notifier(NotifyConfig(urls=[hook.json_url(policy)]), _ctx, say=lambda s: None)
            n.snoozable = lambda p: p == "idle"
            n.snoozed = "The autostop was snoozed by root (uid 0, pid 9) until 2026-06-01 13:00:00 UTC."
            n.on_decision(_stop_decision(policy, f"the {policy} policy decided"))
            n.on_stop_event(StopEvent(time=T0, state=StopState.CONFIRMED, attempt=1, detail="stopped"))
            n.close(wait_s=30)
        hook.wait_for(2)
    by_path = {m["_path"]: m["message"] for m in hook.messages}
    assert "snoozed" not in by_path["/hook/budget"]
    assert "It was stopped because: the budget policy decided" in by_path["/hook/budget"]
    assert "The autostop was snoozed by root" in by_path["/hook/idle"]


def test_a_failed_stop_says_what_was_tried_and_names_costctl_stop_only_where_it_can_work():
    from costctl.notify.events import stop_message

    kw = {"detail": "not confirmed 900s after the first stop request", "attempts": 3, "when": T0,
          "reason": "idle for 10m", "deadline": None}
    api = stop_message("failed", ctx=_ctx(), **kw)
    assert "costctl tried to stop it because: idle for 10m" in api.body
    assert "It was stopped because" not in api.body
    assert "`costctl stop box-1`" in api.body
    no_api = stop_message("failed", ctx=Context(provider="autodl", instance="box-1", run="abcdef0123", host="vm",
                                                api_route=False), **kw)
    assert "`costctl stop box-1`" not in no_api.body and "`costctl stop` cannot stop it either" in no_api.body
    assert "Stop it yourself in autodl's console" in no_api.body
    self_stop = stop_message("self-stop sent", ctx=_ctx(), **{**kw, "detail": "the preflight chose the "
                                                                              "instance's self-stop; running shutdown"})
    assert "API route" not in self_stop.body
    assert self_stop.body.startswith("Instance box-1 runs its own stop command: the preflight chose")


def test_an_unconfirmed_stop_event_is_the_loud_not_confirmed_yet_notification_once():
    from costctl.stopping import StopEvent, StopState

    with FakeWebhook() as hook:
        n = Notifier(NotifyConfig(urls=[hook.json_url("STUCK")]), _ctx, say=lambda s: None)
        n.on_stop_event(StopEvent(time=T0, state=StopState.SENT, attempt=1, detail="accepted"))  # not said
        stuck = StopEvent(time=T0 + timedelta(minutes=2), state=StopState.SENT, attempt=1,
                          detail="not confirmed 120s after the first stop request (status stopping)", unconfirmed=True)
        n.on_stop_event(stuck)
        n.on_stop_event(stuck)  # said once
        n.close(wait_s=30)
        hook.wait_for(1)
        time.sleep(0.3)
    (message,) = hook.messages
    assert message["title"] == "The stop of box-1 is not confirmed yet" and message["type"] == "failure"
    assert "status stopping" in message["message"]
