"""AutoDL's WeChat push as an Apprise plugin: ``autodl://TOKEN``.

AutoDL sends a WeChat message to the account's owner for a POST of
``https://www.autodl.com/api/v1/wechat/message/send`` with the account's token in the
``Authorization`` header (as it is, no ``Bearer``) and a JSON body ``{"title": ..., "name": ...,
"content": ...}`` (the title, the experiment's name, the text), answered with AutoDL's envelope
``{"code": "Success", "msg": ...}``. The token is the one AutoDL's console shows for WeChat
notifications. Sources: no AutoDL documentation page was found; this is the form public scripts
use, e.g. github.com/xty435768/gzic_bus ``api/autodl_notice.py`` (``requests.post(
"https://www.autodl.com/api/v1/wechat/message/send", json={"title", "name", "content"},
headers={"Authorization": token})``) and several training scripts found by searching public code
for ``wechat/message/send``. An older form, ``.../wechat/message/push`` with ``token`` inside the
JSON body (github.com/EricPro-NJU/final_thesis ``server.py``), is not used: it puts the token in
the body.

URLs:

* ``autodl://TOKEN`` — AutoDL itself (HTTPS);
* ``autodl://TOKEN@HOST[:PORT]`` — another endpoint speaking the same API (a proxy; a local fake
  in the tests), HTTPS, or plain HTTP with ``?https=no``.

The token is read from the URL as written (a JWT's case matters; URL parsing lowers a host), and
Apprise's ``url(privacy=True)`` shows it masked. The adapter declares it
(:attr:`costctl_providers.autodl.AutoDLProvider.notify_plugins`); only costctl's sender child
(``python -m costctl.notify.send``) imports it, never a watch.
"""

from __future__ import annotations

import json
import re
from typing import Any

import requests
from apprise.common import NotifyType
from apprise.exception import AppriseImproperlyConfigured
from apprise.plugins.base import NotifyBase
from apprise.utils.parse import parse_bool

from costctl.i18n import _

#: AutoDL's host and the push's path.
AUTODL_HOST = "www.autodl.com"
PUSH_PATH = "/api/v1/wechat/message/send"

_URL_RE = re.compile(r"^autodl://(?P<token>[^@/?#\s]+)(?:@(?P<host>[^/?#\s]+))?", re.IGNORECASE)


class NotifyAutoDL(NotifyBase):
    """Apprise plugin for AutoDL's WeChat push (see the module docstring).

    Args:
        token: the account token (sent as the ``Authorization`` header).
        endpoint: ``host[:port]`` of another endpoint (default AutoDL's).
        https: False for plain HTTP to ``endpoint``.
        run_name: the experiment's name shown in WeChat (costctl's sender sets the run's).
    """

    service_name = "AutoDL WeChat push"
    service_url = "https://www.autodl.com"
    secure_protocol = "autodl"
    setup_url = "https://www.autodl.com"
    title_maxlen = 64
    body_maxlen = 2000
    request_rate_per_sec = 0
    templates = ("{schema}://{token}", "{schema}://{token}@{host}", "{schema}://{token}@{host}:{port}")
    template_tokens = dict(NotifyBase.template_tokens, **{
        "token": {"name": "Token", "type": "string", "private": True, "required": True},
        "host": {"name": "Hostname", "type": "string"},
        "port": {"name": "Port", "type": "int", "min": 1, "max": 65535},
    })

    def __init__(self, token: str | None = None, endpoint: str | None = None, https: bool = True,
                 run_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not token:
            raise AppriseImproperlyConfigured(_("an AutoDL URL needs the account token: autodl://TOKEN"))
        self.token = token
        self.endpoint = endpoint or AUTODL_HOST
        self.https = https
        self.run_name = run_name or "costctl"

    @property
    def push_url(self) -> str:
        """Where the push is posted."""
        return f"{'https' if self.https else 'http'}://{self.endpoint}{PUSH_PATH}"

    def send(self, body: str, title: str = "", notify_type: NotifyType = NotifyType.INFO, **kwargs: Any) -> bool:
        """POST the push; True when AutoDL answered 200 with code ``Success``."""
        payload = {"title": title or self.run_name, "name": self.run_name, "content": body}
        headers = {"User-Agent": self.app_id, "Content-Type": "application/json", "Authorization": self.token}
        self.throttle()
        try:
            r = requests.post(self.push_url, data=json.dumps(payload), headers=headers,
                              verify=self.verify_certificate, timeout=self.request_timeout,
                              allow_redirects=False)
        except requests.RequestException as exc:
            self.logger.warning("AutoDL WeChat push: the request failed: %s", type(exc).__name__)
            return False
        try:
            answer = r.json()
        except ValueError:
            answer = None
        code = answer.get("code") if isinstance(answer, dict) else None
        if r.status_code != 200 or code != "Success":
            msg = answer.get("msg") if isinstance(answer, dict) else None
            self.logger.warning("AutoDL WeChat push failed: HTTP %s, code %s%s", r.status_code, code,
                                f", {str(msg)[:200]}" if msg else "")
            return False
        self.logger.info("Sent AutoDL WeChat push.")
        return True

    @property
    def url_identifier(self) -> tuple[str, str, str]:
        return (self.secure_protocol, self.token, self.endpoint)

    def url(self, privacy: bool = False, *args: Any, **kwargs: Any) -> str:
        """The URL back (the token masked with ``privacy``)."""
        token = self.pprint(self.token, privacy, safe="")
        host = "" if self.endpoint == AUTODL_HOST else f"@{self.endpoint}"
        query = "" if self.https else "?https=no"
        return f"{self.secure_protocol}://{token}{host}{query}"

    @staticmethod
    def parse_url(url: str) -> dict[str, Any] | None:
        """Apprise's parse, with the token and endpoint read from the URL as written."""
        results = NotifyBase.parse_url(url, verify_host=False)
        if not results:
            return results
        found = _URL_RE.match(url.strip())
        if not found:
            return None
        results["token"] = NotifyBase.unquote(found.group("token"))
        results["endpoint"] = found.group("host")
        results["https"] = parse_bool(results["qsd"].get("https", "yes"))
        results["user"] = results["password"] = None
        if not found.group("host"):  # the parser took the token for a host: never keep it there
            results["host"], results["port"] = AUTODL_HOST, None
        return results


__all__ = ["AUTODL_HOST", "NotifyAutoDL", "PUSH_PATH"]
