"""What ``costctl serve`` masks before showing a decision: the secrets this costctl knows, the
secrets a text shows the shape of, and the values of evidence keys that name a secret.

A decision's reason, evidence and outcome are written by a watch, possibly on another machine
(a shared PostgreSQL ledger), and may quote what it saw: an error with a webhook URL in it, a
header. Three layers, each cheap, all applied (:class:`Redactor`):

1. **Known secrets** — every ``SecretStr`` in the settings (each ``[notify] urls`` entry, split
   into its parts by :func:`costctl.notify.redact.url_secrets`; ``[serve] token``; the Jupyter
   token), the password of ``database_url``, string values of ``[providers.*]`` keys that name
   a credential, and the values of the environment variables that hold a provider's credential
   (each adapter's declared ``credential_env``, and those an account table names) or whose names
   end like one (``*_TOKEN``, ``*_API_KEY``, ``*_SECRET``, ``*_PASSWORD``; values of at least
   :data:`MIN_ENV_SECRET_CHARS`): masked wherever they occur (:func:`costctl.notify.redact.redact`).
2. **Shapes** — ``Bearer ...``, ``Authorization: ...``, ``token=...`` / ``api_key=...`` /
   ``secret=...`` / ``password=...`` parameters, environment assignments (``HF_TOKEN=hf_...``,
   ``export OPENAI_API_KEY=...``), the password of a ``scheme://user:PASSWORD@`` URL, and the
   path and query of a chat service's webhook URL (``https://hooks.slack.com/****``: each URL
   Apprise reads as a service's own — Slack, Discord, WeCom, Telegram, Teams... — and Feishu /
   Lark bots; DingTalk's ``access_token=`` is a parameter): the value is masked whatever it is.
3. **Keys** — in evidence (JSON), the value of any key that names a secret by its words
   (:func:`secret_key`: ``token``, ``HF_TOKEN``, ``api_key``, ``password``, ``authorization``,
   ``webhook``, ``webhook_url``...) is masked whole; keys that only contain such a word
   (``key`` — a decision's episode key —, ``max_tokens``, ``hook_ran``, ``webhook_status``) are not.

Every mask is :data:`costctl.notify.redact.MASK`.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..notify.redact import MASK, MIN_SECRET_CHARS, redact, url_secrets

if TYPE_CHECKING:
    from ..config import Settings

#: A key (of evidence, a provider table) whose value is a secret, by its words (:func:`secret_key`):
#: its last word is one of these...
SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "pwd", "authorization", "credential", "credentials",
                          "cookie", "apikey", "accesskey", "privatekey", "passphrase"})
#: ...or its last two words are one of these...
SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
                          ("signing", "key"), ("app", "secret"), ("client", "secret")})
#: ...or it names a webhook (``webhook``, ``hook``) alone or as a URL (``webhook_url``): a
#: webhook's URL carries its secret. ``hook_ran``, ``webhook_status`` or ``max_tokens`` are not.
HOOK_WORDS, URL_WORDS = frozenset({"webhook", "hook"}), frozenset({"url", "uri", "endpoint"})


def _key_words(key: str) -> list[str]:
    """``"X-Api-Key"`` -> ``["x", "api", "key"]``; ``"webhookUrl"`` -> ``["webhook", "url"]``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def secret_key(key: str) -> bool:
    """Whether ``key`` names a secret (see :data:`SECRET_WORDS`): ``token``, ``HF_TOKEN``,
    ``apiKey``, ``X-Api-Key``, ``Authorization``, ``webhook``, ``webhook_url``; not ``key``
    (a decision's episode key), ``max_tokens``, ``token_count``, ``hook_ran``, ``webhook_status``."""
    words = _key_words(key)
    if not words:
        return False
    if words[-1] in SECRET_WORDS or tuple(words[-2:]) in SECRET_PAIRS:
        return True
    if any(w in HOOK_WORDS for w in words):
        return words[-1] in HOOK_WORDS or words[-1] in URL_WORDS
    return False


#: An environment variable whose name ends like this holds a credential.
SECRET_ENV = re.compile(r"(?i)_(token|api_?key|secret|password|passwd)$")
#: Its value is masked only from this length on (a flag such as ``HF_HUB_DISABLE_TOKEN=1`` is none).
MIN_ENV_SECRET_CHARS = 8

#: Text shapes whose value is a secret, whatever it is (group ``value`` is masked).
SHAPES = (
    re.compile(r"(?i)\bbearer\s+(?P<value>[^\s\"',;]+)"),
    re.compile(r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?"
               r"(?P<value>[^\s\"',;]+)"),
    re.compile(r"(?i)\b(?:access[_-]?token|token|api[_-]?key|apikey|secret|passw(?:or)?d)"
               r"[\"']?\s*[:=]\s*[\"']?(?P<value>[^\s\"'&,;)}]+)"),
    # an environment assignment (``HF_TOKEN=hf_...``, ``export OPENAI_API_KEY="sk-..."``): a name
    # ending like a credential variable's (:data:`SECRET_ENV`), a value of 8 or more characters
    # (``HF_HUB_DISABLE_TOKEN=1`` is a flag)
    re.compile(r"(?i)\b[a-z][a-z0-9_]*_(?:token|api_?key|secret|secret_?key|access_?key|password|passwd)"
               r"=[\"']?(?P<value>[^\s\"'&,;)}]{8,})"),
    # ``?key=`` of a WeCom (qyapi.weixin.qq.com) webhook
    re.compile(r"(?i)\bqyapi\.weixin\.qq\.com/[^\s?\"']*\?(?:[^\s\"']*&)?key=(?P<value>[^\s\"'&]+)"),
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]*:(?P<value>[^\s@/]+)@"),
)

#: A URL in a text (its end: white space, a quote, a bracket, or a trailing punctuation mark).
URL = re.compile(r"(?i)\bhttps?://(?P<host>[a-z0-9.-]+(?::\d+)?)(?P<rest>/[^\s\"'<>)\]}]*[^\s\"'<>)\]},.;:!?])")

#: Webhook URLs whose secret is their path, that Apprise does not recognise as such itself:
#: Feishu / Lark bots (``open.feishu.cn/open-apis/bot/v2/hook/<uuid>``).
PATH_HOOKS = re.compile(r"(?i)^(?:open\.feishu\.cn|open\.larksuite\.com)$")


@lru_cache(maxsize=512)
def _apprise_service(url: str) -> bool:
    """Whether Apprise reads ``url`` (``https://...``) as a notification service's own webhook
    URL (Slack's ``hooks.slack.com/services/...``, Discord's ``/api/webhooks/...``, WeCom's,
    Telegram's, Teams'...: each service's ``parse_native_url``): then its path and query are its
    secret. False when Apprise cannot be loaded."""
    try:
        from apprise import Apprise

        return Apprise.instantiate(url, suppress_exceptions=True) is not None
    except Exception:  # noqa: BLE001 - no Apprise, or its bug: the other layers still mask
        return False


def _mask_webhook(match: re.Match[str]) -> str:
    """A webhook URL with its path (and query) masked, its host kept: ``https://hooks.slack.com/****``."""
    host = match.group("host")
    if PATH_HOOKS.match(host.split(":")[0]) or _apprise_service(match.group(0)):
        return match.group(0)[:match.start("rest") - match.start(0)] + "/" + MASK
    return match.group(0)


def _settings_secrets(value: Any, out: set[str]) -> None:
    """Add every ``SecretStr`` under ``value`` (a pydantic model, list or dict) to ``out``."""
    from pydantic import BaseModel, SecretStr

    if isinstance(value, SecretStr):
        text = value.get_secret_value()
        out.update(url_secrets(text) if "://" in text else [text])
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _settings_secrets(getattr(value, name, None), out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _settings_secrets(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _settings_secrets(item, out)


def _table_secrets(table: Any, environ: Mapping[str, str], out: set[str]) -> None:
    """Add the credential values of a ``[providers.*]`` table (nested accounts included) to ``out``:
    string values of keys that name a secret, and the values of the variables ``credential_env``
    names."""
    if isinstance(table, dict):
        for key, value in table.items():
            if key == "credential_env":
                names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
                out.update(environ.get(str(n), "") for n in names)
            elif isinstance(value, str) and secret_key(str(key)):
                out.add(value)
            else:
                _table_secrets(value, environ, out)
    elif isinstance(table, list):
        for item in table:
            _table_secrets(item, environ, out)


def _declared_credential_env() -> list[str]:
    """The credential variables every installed provider adapter declares (``credential_env``);
    an adapter that cannot be loaded declares none."""
    from costctl_providers.registry import available_providers, provider_class

    names: list[str] = []
    for provider in available_providers():
        try:
            names.extend(getattr(provider_class(provider), "credential_env", ()) or ())
        except Exception:  # noqa: BLE001 - a broken third-party adapter: `costctl instances` says why
            continue
    return names


def known_secrets(settings: Settings | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets of layer 1 (see the module docstring), longest first, each at least
    :data:`~costctl.notify.redact.MIN_SECRET_CHARS` long."""
    env = os.environ if environ is None else environ
    out: set[str] = set()
    if settings is not None:
        _settings_secrets(settings, out)
        if settings.database_url:
            try:
                import sqlalchemy as sa

                password = sa.make_url(settings.database_url).password
            except Exception:  # noqa: BLE001 - an unreadable URL: the ledger open says so
                password = None
            if password:
                out.add(str(password))
        _table_secrets(settings.providers, env, out)
    for name in _declared_credential_env():
        out.add(env.get(name, ""))
    for name, value in env.items():
        if SECRET_ENV.search(name) and len(value) >= MIN_ENV_SECRET_CHARS:
            out.add(value)
    return sorted((s for s in out if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)


class Redactor:
    """Masks secrets in texts and in JSON-like evidence (see the module docstring).

    Args:
        secrets: the known secrets (:func:`known_secrets`).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    def text(self, value: str) -> str:
        """``value`` with every known secret and every secret-shaped value masked."""
        value = redact(value, self.secrets)
        if "://" in value:
            value = URL.sub(_mask_webhook, value)
        for shape in SHAPES:
            value = shape.sub(lambda m: m.group(0)[:m.start("value") - m.start(0)] + MASK
                              + m.group(0)[m.end("value") - m.start(0):], value)
        return value

    def value(self, value: Any, key: str | None = None) -> Any:
        """A JSON-like value (dicts, lists, strings, numbers) with its secrets masked: every
        string through :meth:`text`, and the whole value of a key that names a secret."""
        if key is not None and secret_key(key) and value not in (None, "", True, False):
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {str(k): self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


__all__ = ["Redactor", "SHAPES", "known_secrets", "secret_key"]
