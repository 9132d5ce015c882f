"""AutoDL's JSON envelope on top of the shared :class:`~costctl_providers._http.HttpClient`.

Every AutoDL answer (developer API and web console alike) is ``{"code": "Success", "msg": "",
"data": ...}``; any other ``code`` is an error whose text is in ``msg`` (通用 API docs:
"响应代码,成功时为Success" / "错误信息,成功时为空"). Codes seen by API users include
``RecordNotFoundError`` ("未查询到相关实例"), ``RequestParameterIsWrong``, ``TORealName`` and
``BadRequest`` ("无当前资源访问权限"). The header is ``Authorization: <token>`` with no
"Bearer" (esd_api_doc: ``headers = {"Authorization": "token"}``).
"""

from __future__ import annotations

import re
from typing import Any

from costctl_providers._http import AuthError, HttpClient, NotFoundError
from costctl_providers.credentials import Credential

SUCCESS = "Success"
_NOT_FOUND = re.compile(r"notfound|not_found|不存在|未查询到", re.I)
_AUTH = re.compile(r"auth|token|login|unauthori[sz]ed|forbidden", re.I)


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
            ProviderUnavailableError / RateLimitedError: from the HTTP layer.
        """
        where = f"{method.upper()} {path}"
        body = self.http.json(method, path, json=json, params=params, idempotent=idempotent)
        if not isinstance(body, dict) or "code" not in body:
            raise self.http.response_error(f"{where}: answer is not an AutoDL envelope")
        code = str(body.get("code"))
        if code == SUCCESS:
            return body.get("data")
        msg = str(body.get("msg") or "").strip() or "no message"
        text = f"{where}: {msg} (code {code})"
        if _NOT_FOUND.search(code) or _NOT_FOUND.search(msg):
            raise NotFoundError(self.http.redact(f"autodl: {text}"))
        if _AUTH.search(code):
            raise AuthError(self.http.redact(f"autodl: {self.credential.name} was rejected: {text}"))
        raise self.http.response_error(text)
