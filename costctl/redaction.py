"""Masking secrets in what costctl shows: the secrets this costctl knows, the secrets a text shows
the shape of, and the values of evidence keys that name a secret.

One place for every reader of the settings that prints what someone else wrote: ``costctl
serve`` (a decision's reason, evidence and outcome, the unreadable accounts of the fleet),
``costctl fleet`` and ``costctl patrol`` (each unreadable account's error: a provider's error may
echo a key, its own or — behind a shared proxy — another account's), the notification sender
(:mod:`costctl.notify.redact`). Three layers, each cheap, all applied (:class:`Redactor`):

1. **Known secrets** (:func:`known_secrets`) — every ``SecretStr`` in the settings (each
   ``[notify] urls`` entry, split into the parts that can be secrets by :func:`url_secrets`;
   ``[serve] token``; the Jupyter token), the password of ``database_url``, string values of
   ``[providers.*]`` keys that name a credential (every account of every provider), and the
   values of the environment variables that hold a provider's credential (each adapter's declared
   ``credential_env``, and those an account table names) or whose names end like one
   (``*_TOKEN``, ``*_API_KEY``, ``*_SECRET``, ``*_PASSWORD``; values of at least
   :data:`MIN_ENV_SECRET_CHARS`). Each is masked where it stands as a whole token
   (:func:`redact`): not glued to a letter or digit on a side where it starts or ends with one,
   so the secret ``hook`` would never mask ``webhook_status``. One of :data:`ANYWHERE_CHARS` or
   more characters is masked wherever it occurs (no word is that long by chance; a token may be
   glued to an encoding: ``Bearer%20TOKEN``).
2. **Shapes** (:data:`SHAPES`) — ``Bearer ...``, ``Authorization: ...``, ``token=...`` /
   ``api_key: ...`` / ``secret=...`` / ``password=...`` parameters, environment assignments
   (``HF_TOKEN=hf_...``, ``export OPENAI_API_KEY=...``, ``WANDB_API_KEY: ...``), command-line
   flags (``--api-key K``, ``--hf-token K``, ``--password=K``), bare Hugging Face (``hf_`` and 30
   or more letters and digits) and OpenAI (``sk-...``, ``sk-proj-...``) tokens, the password of a
   ``scheme://user:PASSWORD@`` URL, Telegram bot tokens (``api.telegram.org/bot****/...``,
   ``tgram://****/...``), and the path and query of a chat service's webhook URL
   (``https://hooks.slack.com/****``: each URL Apprise reads as a service's own — Slack, Discord,
   WeCom, Teams... — and Feishu / Lark bots; DingTalk's ``access_token=`` is a parameter): the
   value is masked whatever it is. Shapes run before the known secrets, so masking a known secret
   never breaks the shape another secret is found by.
3. **Keys** — in evidence (JSON), the value of any key that names a secret by its words
   (:func:`secret_key`: ``token``, ``HF_TOKEN``, ``api_key``, ``password``, ``authorization``,
   ``webhook``, ``webhook_url``...) is masked whole, and so is the second item of a pair whose first
   item names one (``[["X-Api-Key", "K"]]``, a header list); keys that only contain such a word
   (``key`` — a decision's episode key —, ``max_tokens``, ``hook_ran``, ``webhook_status``) are not.

Which parts of a notification URL are secrets (:func:`url_secrets`): the user and the password
always; a query value when its key names a secret (``?secret=S``, ``?+Authorization=Bearer T``);
every other part — a host that is no network name, a path segment, any other query value, the
fragment — only when it is token-like (:func:`token_like`: 8 or more characters with a digit or
both letter cases, or 16 or more): ``json://127.0.0.1/hook``'s ``hook`` and ``ntfy://ntfy.sh/train``'s
``train`` are ordinary words that mask nothing; ``/hook/TOKEN123``'s ``TOKEN123`` is a secret.

Every mask is :data:`MASK`. Standard library and :mod:`costctl.i18n` only at import (the watch imports it through
:mod:`costctl.notify.redact`); pydantic, SQLAlchemy, Apprise and the adapter registry are imported
when first needed.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from .i18n import text_map

#: What replaces a secret in a text.
MASK = "****"

#: Fragments shorter than this are not masked on their own (``/a/``, ``?x=1``): masking them
#: would blank ordinary words and digits everywhere; they are no credential either.
MIN_SECRET_CHARS = 4

#: A known secret this long or longer is masked wherever it occurs; a shorter one only as a whole
#: token (see :func:`redact`).
ANYWHERE_CHARS = 16

_NETWORK_NAME = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", re.IGNORECASE)


# ----------------------------------------------------------------------------- URL parts


def split_url(url: str):
    """``urlsplit`` that never raises (an invalid port, an odd bracket): None for what it cannot read."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
        return parts
    except ValueError:
        return None


def shown_host(host: str | None) -> str | None:
    """``host`` when it reads as a network address or a DNS name (``hooks.slack.com``,
    ``127.0.0.1``, ``localhost``), else None: a bare word may be a token (``tgram://BOTTOKEN``)."""
    if not host:
        return None
    if host == "localhost":
        return host
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    return host if _NETWORK_NAME.match(host) else None


def token_like(part: str) -> bool:
    """Whether a URL part that only may be a secret (a host, a path segment, a query value, the
    fragment) reads as one: 8 or more characters with a digit or both letter cases
    (``TOKEN123``, ``mytopicXYZ``, ``123456789``), or 16 or more of any kind. ``hook``, ``train``,
    ``services``, ``markdown`` are words, not secrets."""
    if len(part) >= ANYWHERE_CHARS:
        return True
    if len(part) < 8:
        return False
    return any(c.isdigit() for c in part) or (any(c.islower() for c in part) and any(c.isupper() for c in part))


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that can be secrets (see the module docstring), in raw and decoded
    form, longest first (the whole URL first): what :func:`redact` masks."""
    sure: set[str] = {url.strip()}  # secrets whatever they look like
    maybe: set[str] = set()  # secrets only when token-like
    parts = split_url(url)
    text = url.strip()
    if parts is None:
        # unreadable (``tgram://123456789:TOKEN/CHAT``: a "port" that is none): every piece may be one
        maybe.update(re.split(r"[:/@?&=#]+", text.split("://", 1)[-1]))
    else:
        netloc = parts.netloc
        userinfo = netloc.rpartition("@")[0] if "@" in netloc else ""
        sure.update(re.split(r"[:]", userinfo, maxsplit=1))
        host = parts.hostname
        if host and shown_host(host) is None:
            maybe.add(host)
            # the host as written (its case kept: urlsplit lowers it)
            written = netloc.rpartition("@")[2]
            maybe.add(written.rsplit(":", 1)[0] if written.count(":") == 1 else written)
        maybe.update(parts.path.split("/"))
        for raw in parts.query.split("&"):
            key, _eq, raw_value = raw.partition("=")
            value = unquote(raw_value.replace("+", " "))
            named = secret_key(unquote(key))
            for piece in (raw_value, value, *value.split()):  # "Bearer TOKEN"
                (sure if named else maybe).add(piece)
            if named or token_like(raw_value) or token_like(value):
                sure.add(raw)
        maybe.add(parts.fragment)
    found = sure | {p for p in maybe if token_like(p) or token_like(unquote(p))}
    decoded = {unquote(f) for f in found}
    return sorted((f for f in found | decoded if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True)


def all_secrets(urls: Iterable[str]) -> list[str]:
    """:func:`url_secrets` of every URL, longest first."""
    out: set[str] = set()
    for url in urls:
        out.update(url_secrets(url))
    return sorted(out, key=len, reverse=True)


@lru_cache(maxsize=4096)
def _whole(secret: str) -> re.Pattern[str]:
    """``secret`` as a pattern that matches it as a whole token (see :func:`redact`)."""
    before = r"(?<![A-Za-z0-9])" if secret[0].isalnum() else ""
    after = r"(?![A-Za-z0-9])" if secret[-1].isalnum() else ""
    return re.compile(before + re.escape(secret) + after)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret (longest first) replaced by :data:`MASK`: one of
    :data:`ANYWHERE_CHARS` characters or more wherever it occurs, a shorter one where it stands
    as a whole token (not glued to a letter or digit on a side where it starts or ends with one:
    the secret ``hook`` leaves ``webhook_status`` and ``hooks.slack.com`` alone)."""
    for secret in secrets:
        if not secret or secret not in text:
            continue
        if len(secret) >= ANYWHERE_CHARS:
            text = text.replace(secret, MASK)
        else:
            text = _whole(secret).sub(MASK, text)
    return text


def clip(text: str, limit: int, secrets: Iterable[str] = ()) -> str:
    """``text`` masked (:func:`redact` of ``secrets``) and then cut to ``limit`` characters with
    ``...``: masking first, so a secret the cut would fall inside is never shown in part."""
    text = redact(text, secrets)
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


# ----------------------------------------------------------------------------- keys


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


# ----------------------------------------------------------------------------- shapes


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
    # an environment assignment (``HF_TOKEN=hf_...``, ``export OPENAI_API_KEY="sk-..."``,
    # ``WANDB_API_KEY: ...``): a name ending like a credential variable's (:data:`SECRET_ENV`), a
    # value of 8 or more characters (``HF_HUB_DISABLE_TOKEN=1`` is a flag)
    re.compile(r"(?i)\b[a-z][a-z0-9_]*_(?:token|api_?key|secret|secret_?key|access_?key|password|passwd)"
               r"(?:=|\s*:\s*)[\"']?(?P<value>[^\s\"'&,;)}]{8,})"),
    # a command-line flag naming a credential (``--api-key K``, ``--hf-token K``, ``--password=K``);
    # ``--tokens 512``, ``--max-tokens 512``, ``--token-count 3`` name none
    re.compile(r"(?i)(?<![\w-])--?(?:[a-z0-9]+[-_])*(?:token|api[-_]?key|apikey|secret|secret[-_]?key|access[-_]?key"
               r"|passw(?:or)?d)(?:=|\s+)[\"']?(?P<value>(?!-)[^\s\"']+)"),
    # bare tokens: Hugging Face (``hf_`` + 30 or more letters and digits), OpenAI (``sk-``, ``sk-proj-``)
    re.compile(r"\bhf_(?P<value>[A-Za-z0-9]{30,})\b"),
    re.compile(r"(?<![\w-])sk-(?:proj-|svcacct-|admin-)?(?P<value>[A-Za-z0-9_-]{20,})"),
    # Telegram bot tokens: ``api.telegram.org/bot<id>:<token>/...``, Apprise's ``tgram://<id>:<token>/...``
    re.compile(r"(?i)\bapi\.telegram\.org/(?:file/)?bot(?P<value>[^\s/\"'?#]+)"),
    re.compile(r"(?i)\btgram://(?P<value>[^\s/\"'?#]+)"),
    # ``?key=`` of a WeCom (qyapi.weixin.qq.com) webhook
    re.compile(r"(?i)\bqyapi\.weixin\.qq\.com/[^\s?\"']*\?(?:[^\s\"']*&)?key=(?P<value>[^\s\"'&]+)"),
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]*:(?P<value>[^\s@/]+)@"),
)

#: A URL in a text (its end: white space, a quote, a bracket, or a trailing punctuation mark).
URL = re.compile(r"(?i)\bhttps?://(?P<host>[a-z0-9.-]+(?::\d+)?)(?P<rest>/[^\s\"'<>)\]}]*[^\s\"'<>)\]},.;:!?])")

#: Webhook URLs whose secret is their path, that Apprise does not recognise as such itself:
#: Feishu / Lark bots (``open.feishu.cn/open-apis/bot/v2/hook/<uuid>``).
PATH_HOOKS = re.compile(r"(?i)^(?:open\.feishu\.cn|open\.larksuite\.com)$")


class _Probing(logging.Filter):
    """Drops the ``apprise`` logger's records while this thread only asks Apprise whether it
    reads a URL (:func:`_apprise_service`): "Unparseable URL ..." is no error of anyone's
    there. Other threads' records (a notification being sent) pass."""

    local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "active", False)


_PROBING = _Probing()


@lru_cache(maxsize=512)
def _apprise_service(url: str) -> bool:
    """Whether Apprise reads ``url`` (``https://...``) as a notification service's own webhook
    URL (Slack's ``hooks.slack.com/services/...``, Discord's ``/api/webhooks/...``, WeCom's,
    Teams'...: each service's ``parse_native_url``): then its path and query are its secret.
    False when Apprise cannot be loaded."""
    try:
        from apprise import Apprise

        logger = logging.getLogger("apprise")
        if _PROBING not in logger.filters:
            logger.addFilter(_PROBING)
        _Probing.local.active = True
        try:
            return Apprise.instantiate(url, suppress_exceptions=True) is not None
        finally:
            _Probing.local.active = False
    except Exception:  # noqa: BLE001 - no Apprise, or its bug: the other layers still mask
        return False


def _mask_webhook(match: re.Match[str]) -> str:
    """A webhook URL with its path (and query) masked, its host kept: ``https://hooks.slack.com/****``."""
    host = match.group("host")
    if PATH_HOOKS.match(host.split(":")[0]) or _apprise_service(match.group(0)):
        return match.group(0)[:match.start("rest") - match.start(0)] + "/" + MASK
    return match.group(0)


# ----------------------------------------------------------------------------- known secrets


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


def known_secrets(settings: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets of layer 1 (see the module docstring) of ``settings`` (a
    :class:`costctl.config.Settings`, or None: the environment's only), longest first, each at
    least :data:`MIN_SECRET_CHARS` long."""
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


def share_with_adapters(secrets: Iterable[str]) -> None:
    """Register ``secrets`` with the provider adapters' process-wide redactor
    (:data:`costctl_providers._http.GLOBAL_REDACTOR`), which masks them in every adapter's error
    text *before* a provider's answer is cut short: an account's error that echoes another
    account's key never shows a piece of it the cut left unmaskable."""
    from costctl_providers._http import GLOBAL_REDACTOR

    for secret in secrets:
        GLOBAL_REDACTOR.add(secret)


class Redactor:
    """Masks secrets in texts and in JSON-like evidence (see the module docstring).

    Args:
        secrets: the known secrets (:func:`known_secrets`).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    @classmethod
    def of(cls, settings: Any, extra: Iterable[str] = ()) -> Redactor:
        """A redactor of every secret ``settings`` and the environment know (:func:`known_secrets`),
        and ``extra``."""
        return cls([*known_secrets(settings), *extra])

    def text(self, value: str) -> str:
        """``value`` with every secret-shaped value and every known secret masked (shapes first:
        a known secret masked inside a webhook's host never hides that webhook's path from its shape);
        a translated message keeps its English, masked too (:func:`costctl.i18n.text_map`)."""
        return text_map(self._text, value)

    def _text(self, value: str) -> str:
        value = str(value)
        if "://" in value:
            value = URL.sub(_mask_webhook, value)
        for shape in SHAPES:
            value = shape.sub(lambda m: m.group(0)[:m.start("value") - m.start(0)] + MASK
                              + m.group(0)[m.end("value") - m.start(0):], value)
        return redact(value, self.secrets)

    def optional(self, value: str | None) -> str | None:
        """:meth:`text` of ``value``, or None."""
        return None if value is None else self.text(value)

    def value(self, value: Any, key: str | None = None) -> Any:
        """A JSON-like value (dicts, lists, strings, numbers) with its secrets masked: every
        string through :meth:`text`, the whole value of a key that names a secret, and the second
        item of a pair whose first item names one (``["X-Api-Key", "K"]``)."""
        if key is not None and secret_key(key) and value not in (None, "", True, False):
            return MASK
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {str(k): self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if len(value) == 2 and isinstance(value[0], str):
                return [self.text(value[0]), self.value(value[1], value[0])]
            return [self.value(v) for v in value]
        return value



def _secret_flag(arg: str) -> bool:
    """Whether ``arg`` is a command-line option naming a secret whose value is the next
    argument (``--hf-token``, ``--api-key``, ``-password``; not ``--max-tokens``, not
    ``--token=X``: that one carries its value)."""
    return arg.startswith("-") and "=" not in arg and len(arg) > 2 and secret_key(arg.lstrip("-"))


def redact_argv(argv: Sequence[str] | None, redactor: Redactor | None = None) -> list[str] | None:
    """A command line (``["python", "train.py", "--hf-token", "hf_..."]``) with its secrets
    masked, one argument for one: each argument through :meth:`Redactor.text` (``--api-key=K``,
    ``HF_TOKEN=K``, bare ``hf_``/``sk-`` tokens, URLs' passwords and webhooks), and the argument
    after an option that names a secret (``--hf-token K``). For the copies of a run that leave
    its machine (the team's central ledger): the machine's own ledger keeps the command as
    typed, which a resume or ``--attach`` needs. None stays None."""
    if argv is None:
        return None
    redactor = redactor or Redactor()
    out: list[str] = []
    for i, arg in enumerate(argv):
        if i and _secret_flag(argv[i - 1]) and arg and not arg.startswith("-"):
            out.append(MASK)
        else:
            out.append(redactor.text(str(arg)))
    return out

__all__ = ["ANYWHERE_CHARS", "MASK", "MIN_SECRET_CHARS", "Redactor", "SHAPES", "all_secrets", "clip", "redact_argv",
           "known_secrets", "redact", "secret_key", "share_with_adapters", "shown_host", "split_url", "token_like", "url_secrets"]
