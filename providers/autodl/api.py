"""AutoDL's JSON envelope on top of the shared :class:`~costctl_providers._http.HttpClient`.

Every AutoDL answer (developer API and web console alike) is ``{"code": "Success", "msg": "",
"data": ...}``; any other ``code`` is an error whose text is in ``msg`` (通用 API docs:
"响应代码,成功时为Success" / "错误信息,成功时为空"). Codes seen by API users include
``RecordNotFoundError`` ("未查询到相关实例"), ``RequestParameterIsWrong``, ``TORealName`` and
``BadRequest`` ("无当前资源访问权限"). The header is ``Authorization: <token>`` with no
"Bearer" (esd_api_doc: ``headers = {"Authorization": "token"}``).

Transient or permanent (AutoDL documents no code list, so this is our rule): an envelope whose
``code`` or ``msg`` speaks of rate limiting (``TooManyRequests``, ``RateLimit``, "请求过于频繁")
is a transient :class:`RateLimitedError`; one about the server (``InternalError``,
``ServerError``, ``ServiceUnavailable``, ``SystemBusy``, ``Timeout``, "系统繁忙", "稍后再试")
is a transient :class:`ProviderUnavailableError`; both are retried on idempotent calls like an
HTTP 503. Not-found and token codes, ``RequestParameterIsWrong``, ``BadRequest``,
``InstanceStatusNotAllowed``, an answer about stock or balance (AutoDL answers "暂无库存" with
code ``InternalError``) and every other code are permanent. An unknown code is permanent.
"""

from __future__ import annotations

import re
from typing import Any

from costctl.i18n import _

from costctl_providers._http import AuthError, HttpClient, NotFoundError
from costctl_providers.credentials import Credential

SUCCESS = "Success"
_NOT_FOUND = re.compile(r"notfound|not_found|不存在|未查询到", re.I)
_AUTH = re.compile(r"auth|token|login|unauthori[sz]ed|forbidden", re.I)
#: Messages that are permanent whatever the code says (no stock, no money, bad parameters).
PERMANENT = re.compile(r"库存|stock|余额|balance|参数|parameter", re.I)
#: Envelope codes/messages that mean "rate limited": transient.
RATE_LIMITED = re.compile(r"ratelimit|rate_limit|toomany|too_many|throttl|频繁|限流", re.I)
#: Envelope codes/messages that mean "the server failed, try again": transient.
TRANSIENT = re.compile(
    r"internal|servererror|server_error|unavailable|busy|timeout|timedout|retry|繁忙|稍后再试|超时", re.I,
)


class EnvelopeClient:
    """Calls one AutoDL API root and unwraps the envelope.

    Args:
        http: the HTTP client (its ``auth_header`` carries the token).
        credential: the token's source, named in :class:`AuthError` messages (never its value).
    """

    def __init__(self, http: HttpClient, credential: Credential) -> None:
        self.http = http
        self.credential = credential

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool,
    ) -> Any:
        """Send one call and return the envelope's ``data``.

        Raises:
            AuthError: HTTP 401/403, or an envelope code about the token (names the credential).
            NotFoundError: HTTP 404 or ``RecordNotFoundError``-like codes.
            ProviderResponseError: any other non-``Success`` code (the message carries ``msg``
                and ``code``), or a body that is not an envelope.
            ProviderUnavailableError / RateLimitedError: from the HTTP layer, or a transient
                envelope code, after the retries (idempotent calls only).
        """
        where = f"{method.upper()} {path}"
        return self.http.json(method, path, json=json, params=params, idempotent=idempotent,
                              unwrap=lambda body: self.unwrap(body, where), operation=path.rstrip("/").rsplit("/", 1)[-1])

    def unwrap(self, body: Any, where: str) -> Any:
        """The envelope's ``data``, or the typed error its ``code`` means (module docstring):
        transient for rate-limit and server codes, permanent otherwise."""
        if not isinstance(body, dict) or "code" not in body:
            raise self.http.response_error(_("{where}: answer is not an AutoDL envelope").format(where=where))
        code = str(body.get("code"))
        if code == SUCCESS:
            return body.get("data")
        msg = str(body.get("msg") or "").strip() or _("no message")
        text = _("{where}: {message} (code {code})").format(where=where, message=msg, code=code)
        if _NOT_FOUND.search(code) or _NOT_FOUND.search(msg):
            raise NotFoundError(self.http.redact(_("autodl: {error}").format(error=text)))
        if _AUTH.search(code):
            raise AuthError(self.http.redact(_("autodl: {credential} was rejected: {error}").format(
                credential=self.credential.name, error=text)))
        if PERMANENT.search(msg):
            raise self.http.response_error(text)
        if RATE_LIMITED.search(code) or RATE_LIMITED.search(msg):
            raise self.http.transient_error(text, rate_limited=True)
        if TRANSIENT.search(code) or TRANSIENT.search(msg):
            raise self.http.transient_error(text)
        raise self.http.response_error(text)
