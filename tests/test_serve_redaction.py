"""``costctl serve``'s redaction of decisions: environment assignments and chat webhook URLs
whose secret is in the path are masked, the text around them stays readable, and keys or prose
that only contain a word like "hook" or "token" mask nothing."""

from __future__ import annotations

import pytest

from costctl.serve.redaction import Redactor, secret_key

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


@pytest.mark.parametrize(("text", "secret", "kept"), [
    (f"download failed: HF_TOKEN={HF} was rejected", HF, "download failed: HF_TOKEN=**** was rejected"),
    (f"export OPENAI_API_KEY=\"sk-proj-0123456789abcdef\" && python train.py", "sk-proj-0123456789abcdef",
     "export OPENAI_API_KEY=\"****\" && python train.py"),
    ("env: WANDB_SECRET=wb-0123456789ab DB_PASSWORD='pa55w0rd-xyz' done", "wb-0123456789ab",
     "env: WANDB_SECRET=**** DB_PASSWORD='****' done"),
    ("POST https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx failed: 404",
     "abcdefghijklmnopqrstuvwx", "POST https://hooks.slack.com/**** failed: 404"),
    ("notify https://discord.com/api/webhooks/123456789012345678/AbCdEf-ghIJkl_mnOPqrsTUVwxyz0123456789.",
     "AbCdEf-ghIJkl_mnOPqrsTUVwxyz0123456789", "notify https://discord.com/****."),
    ("send to https://open.feishu.cn/open-apis/bot/v2/hook/0a1b2c3d-4e5f-6789-abcd-ef0123456789 timed out",
     "0a1b2c3d-4e5f-6789-abcd-ef0123456789", "send to https://open.feishu.cn/**** timed out"),
    ("(https://oapi.dingtalk.com/robot/send?access_token=0123456789abcdef0123456789abcdef) 310000",
     "0123456789abcdef0123456789abcdef", "(https://oapi.dingtalk.com/robot/send?access_token=****) 310000"),
    ("wecom https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7aaa-4bc4-97a0-0ec2sifa5aaa: 93000",
     "693a91f6-7aaa-4bc4-97a0-0ec2sifa5aaa", "wecom https://qyapi.weixin.qq.com/****: 93000"),
])
def test_secrets_in_free_text_are_masked_and_the_text_kept(text, secret, kept):
    masked = Redactor().text(text)
    assert secret not in masked
    assert masked == kept


@pytest.mark.parametrize("text", [
    "the webhook returned 200 after 3 tries; see https://example.com/docs/webhooks/setup",
    "HF_HUB_DISABLE_TOKEN=1 set; max_tokens=4096",
    "hook_ran=true, tokens_per_s=1234.5",
])
def test_innocent_text_is_not_masked(text):
    assert Redactor().text(text) == text


def test_evidence_keys_that_only_contain_a_secret_word_are_kept():
    evidence = {"hook_ran": True, "webhook_status": 200, "hook_output": "checkpoint saved", "max_tokens": 4096,
                "token_count": 123456, "key": "idle:2026", "webhook": "https://h/x", "webhook_url": "https://h/y",
                "HF_TOKEN": HF, "X-Api-Key": "k-0123456789", "apiKey": "k-abcdef"}
    assert Redactor().value(evidence) == {
        "hook_ran": True, "webhook_status": 200, "hook_output": "checkpoint saved", "max_tokens": 4096,
        "token_count": 123456, "key": "idle:2026", "webhook": "****", "webhook_url": "****", "HF_TOKEN": "****",
        "X-Api-Key": "****", "apiKey": "****"}


@pytest.mark.parametrize(("key", "secret"), [
    ("token", True), ("access_token", True), ("Authorization", True), ("db_password", True), ("client_secret", True),
    ("api_key", True), ("hookUrl", True), ("credential", True),
    ("hook_ran", False), ("webhook_sent", False), ("key", False), ("max_tokens", False), ("secretary", False),
    ("tokenizer", False), ("keyboard", False),
])
def test_secret_key_reads_the_key_s_words(key, secret):
    assert secret_key(key) is secret


@pytest.mark.parametrize(("text", "secret", "kept"), [
    ("POST https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage failed",
     "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "POST https://api.telegram.org/bot****/sendMessage failed"),
    ("apprise: tgram://123456:SECRET/chat unreachable", "SECRET", "apprise: tgram://****/chat unreachable"),
    ("config WANDB_API_KEY: SECRET3x loaded", "SECRET3x", "config WANDB_API_KEY: **** loaded"),
    ("python train.py --api-key SECRET11 --hf-token SECRET22 --password=x --epochs 3",
     "SECRET11", "python train.py --api-key **** --hf-token **** --password=**** --epochs 3"),
    (f"login with {HF} failed", HF, "login with hf_**** failed"),
    ("openai: sk-proj-AbCdEf0123456789_ghIJkl-mnOP rejected, sk-0123456789abcdefABCDEF too",
     "AbCdEf0123456789_ghIJkl-mnOP", "openai: sk-proj-**** rejected, sk-**** too"),
])
def test_telegram_flags_colon_assignments_and_bare_tokens_are_masked(text, secret, kept):
    masked = Redactor().text(text)
    assert secret not in masked
    assert masked == kept


@pytest.mark.parametrize("text", [
    "python train.py --tokens 512 --max-tokens 4096 --token-count 3 --tokenizer gpt2",
    "max_tokens=4096 token_count=12 tokens: 512 hf_hub ok; task-sk-1 done; skip-connections",
])
def test_flags_and_words_that_only_contain_a_secret_word_are_kept(text):
    assert Redactor().text(text) == text


def test_an_evidence_pair_whose_first_item_names_a_secret_has_its_second_masked():
    evidence = {"headers": [["X-Api-Key", "SECRET23"], ["Accept", "application/json"]], "argv": ["--epochs", "3"]}
    assert Redactor().value(evidence) == {"headers": [["X-Api-Key", "****"], ["Accept", "application/json"]],
                                          "argv": ["--epochs", "3"]}


def test_notify_url_words_mask_nothing_and_never_break_another_shape():
    from costctl.notify.redact import url_secrets

    r = Redactor([*url_secrets("json://127.0.0.1:18998/hook"), *url_secrets("ntfy://ntfy.sh/train")])
    assert r.text("POST https://hooks.slack.com/services/T000/B000/SECRET4 failed") == \
        "POST https://hooks.slack.com/**** failed"
    assert r.text("webhook_status=ok hook_ran=true; train loss plateaued") == \
        "webhook_status=ok hook_ran=true; train loss plateaued"
    # a token-like part is still a secret, masked where it stands as a whole token
    r = Redactor(url_secrets("json://127.0.0.1:18998/hook/TOKEN123?format=markdown"))
    assert r.text("sent to /hook/TOKEN123 as markdown; xTOKEN1234 kept") == "sent to /hook/**** as markdown; xTOKEN1234 kept"


def test_asking_apprise_about_a_url_logs_nothing(caplog):
    """Whether Apprise reads a URL is a question, not an error: its "Unparseable URL" line
    (with the URL partly shown) never reaches the logs; its other records still do."""
    import logging

    from costctl.redaction import Redactor

    with caplog.at_level(logging.DEBUG, logger="apprise"):
        shown = Redactor([]).text("POST https://api.telegram.org/bot555000111:ZZHdqTcvCH1vGWJxfSeofSAs0K5PALDxyz/"
                                  "sendMessage failed")
        logging.getLogger("apprise").error("a notification failed")
    assert "ZZHdq" not in shown
    assert [r.getMessage() for r in caplog.records if r.name == "apprise"] == ["a notification failed"]
