"""A fake AutoDL API (developer API and web console) on :class:`tests.fakes.http.FakeHTTPServer`.

Responses are quoted from AutoDL's documentation:

* 弹性部署API文档, https://www.autodl.com/docs/esd_api_doc/ — "API服务端HOST地址为:
  https://api.autodl.com"; "鉴权 ... headers = {"Authorization": "token"}" (no "Bearer");
  response parameters "code String 响应代码,成功时为Success", "msg String 错误信息,成功时为空",
  e.g. ``{"code": "Success", "msg": "", "data": {"list": [...], "page_index": 1,
  "page_size": 10, "max_page": 1, "offset": 0}}``; 获取地区GPU库存 ``POST
  /api/v1/dev/machine/region/gpu_stock`` answers ``data: [{"RTX 4090": {"idle_gpu_num": ...,
  "total_gpu_num": ...}}]``.
* 容器实例Pro API, https://www.autodl.com/docs/instance_pro_api/ — create ``POST
  /api/v1/dev/instance/pro/create`` (``req_gpu_amount``, ``expand_system_disk_by_gb``,
  ``gpu_spec_uuid``, ``image_uuid``, ``cuda_v_from``) returning the uuid in ``data``
  (``"pro-76419909953e"``); ``GET .../pro/snapshot`` and ``GET .../pro/status`` with
  ``instance_uuid`` (status example ``"running"``); ``POST .../pro/list`` ``{page_index,
  page_size}``; ``POST .../pro/power_on`` ``{instance_uuid, payload: "gpu"}`` (answers
  ``data: {"description": "开机指令已下发,请稍后关注实例最新状态"}``); ``power_off`` and
  ``release`` answer ``data: null``; release needs the instance shut down first.
* 通用API, https://www.autodl.com/docs/common_api/ — ``POST /api/v1/dev/wallet/balance``
  answers ``{"assets": ..., "accumulate": ..., "voucher_balance": ...}``, money in 1/1000 yuan.

Error envelopes: ``RecordNotFoundError`` / "未查询到相关实例" is what the Pro API answers for an
unknown uuid (reported by API users). Not documented, so ASSUMED here: an HTTP 401 with
``{"code": "AuthorizeFailed", "msg": "..."}`` for a wrong token, and an error envelope
``{"code": "InstanceStatusNotAllowed"}`` for power_off of an instance that is not running.

The web console (``https://www.autodl.com``) routes ``POST /api/v1/instance``,
``/api/v1/instance/power_on`` (``payload: "gpu" | "non_gpu"``), ``/api/v1/instance/power_off``
follow the same envelope (unofficial; fields as the console's list shows them).

State: each instance moves ``running -> shutting_down`` on power_off and to ``shutdown``
after ``transition_reads`` status reads (list/status/snapshot); power_on goes ``shutdown ->
starting -> running`` the same way. :attr:`FakeAutoDL.transitions` counts real state changes,
so a test can assert "stopped exactly once" however many HTTP calls arrived.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http import FakeHTTPServer, RecordedRequest, Reply

TOKEN = "autodl-dev-token-123456"
CONSOLE_TOKEN = "eyJhbGciOi.console.jwt-7890"

PRO = "/api/v1/dev/instance/pro"


def ok(data: Any) -> Reply:
    """``{"code": "Success", "msg": "", "data": data}``."""
    return Reply.json({"code": "Success", "msg": "", "data": data})


def fail(code: str, msg: str, status: int = 200) -> Reply:
    """An error envelope."""
    return Reply.json({"code": code, "msg": msg, "data": None}, status=status)


def pro_list_item(uuid: str, status: str = "running", **extra: Any) -> dict[str, Any]:
    """A Pro list item with the fields the docs list (uuid, region, status, charge_type...)."""
    item = {
        "uuid": uuid,
        "name": "experiment",
        "region_sign": "westDC2",
        "region_name": "西北企业区",
        "status": status,
        "sub_status": "",
        "start_mode": "gpu",
        "charge_type": "payg",
        "req_gpu_amount": 1,
        "gpu_spec_uuid": "pro6000-p",
        "created_at": "2026-03-01T09:00:00+08:00",
        "started_at": {"Time": "2026-03-01T09:00:05+08:00", "Valid": True},
        "stopped_at": {"Time": "0001-01-01T00:00:00Z", "Valid": False},
    }
    item.update(extra)
    return item


def pro_snapshot(payg_price: int = 1880, gpu: str = "RTX PRO 6000", **extra: Any) -> dict[str, Any]:
    """A Pro snapshot: price in 厘 per hour, GPU alias, and connection secrets that the adapter
    must drop (``root_password``, ``jupyter_token``, ``ssh_command``)."""
    snap = {
        "payg_price": payg_price,
        "origin_pay_price": payg_price,
        "snapshot_gpu_alias_name": gpu,
        "region_sign": "westDC2",
        "cpu_arch": "x86",
        "ssh_command": "ssh -p 12345 root@connect.westc.gpuhub.com",
        "proxy_host": "connect.westc.gpuhub.com",
        "ssh_port": 12345,
        "root_password": "s3cr3t-root-pw",
        "jupyter_token": "jt-0123456789abcdef",
        "jupyter_domain": "https://jupyter-pro.example",
        "usage_info": {"valid": True, "cpu_usage_percent": 3.1, "mem_usage_percent": 10.0},
    }
    snap.update(extra)
    return snap


@dataclass
class FakeInstance:
    """One fake instance: its list item, snapshot, pending transition and read countdown."""

    item: dict[str, Any]
    snapshot: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    reads_left: int = 0


class FakeAutoDL:
    """Stateful fake AutoDL developer API + web console.

    Args:
        transition_reads: status reads before ``shutting_down``/``starting`` completes.

    Attributes:
        server: the :class:`FakeHTTPServer` (``server.url`` is the base URL for both APIs).
        instances: uuid -> :class:`FakeInstance`.
        console_instances: uuid -> console list item (ordinary instances).
        transitions: list of ``(uuid, from, to)`` real state changes requested by calls.
        balance_milli: wallet ``assets`` in 厘.
    """

    def __init__(self, *, transition_reads: int = 1) -> None:
        self.server = FakeHTTPServer()
        self.transition_reads = transition_reads
        self.instances: dict[str, FakeInstance] = {}
        self.console_instances: dict[str, dict[str, Any]] = {}
        self.transitions: list[tuple[str, str, str]] = []
        self.balance_milli = 123_450
        self.created = 0
        self._lock = threading.RLock()
        self._delay_power_off: float = 0.0
        #: A lying provider: power_off is answered success and nothing happens.
        self.ignore_stops = False
        self._routes()

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> "FakeAutoDL":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return self.server.url

    def add_pro(self, uuid: str, status: str = "running", *, payg_price: int = 1880, gpu: str = "RTX PRO 6000",
                **extra: Any) -> None:
        """Add a Pro instance."""
        self.instances[uuid] = FakeInstance(pro_list_item(uuid, status, **extra), pro_snapshot(payg_price, gpu))

    def add_console(self, uuid: str, status: str = "running", **extra: Any) -> None:
        """Add an ordinary instance visible to the console API."""
        item = {
            "uuid": uuid, "status": status, "charge_type": "payg", "payg_price": 2580,
            "req_gpu_amount": 1, "snapshot_gpu_alias_name": "RTX 4090", "start_mode": "gpu",
            "region_name": "北京B区", "region_sign": "beijingDC2",
            "started_at": {"Time": "2026-03-02T08:00:00+08:00", "Valid": True},
            "stopped_at": {"Time": "0001-01-01T00:00:00Z", "Valid": False},
            "root_password": "console-root-pw",
        }
        item.update(extra)
        self.console_instances[uuid] = item

    def delay_next_power_off(self, seconds: float) -> None:
        """The next power_off is carried out at once but answered after ``seconds`` (a client
        timeout on a call that did happen)."""
        self._delay_power_off = seconds

    def inject_envelope(self, path: str, code: str = "InternalError", msg: str = "系统繁忙,请稍后再试", *,
                        method: str = "POST", times: int = 1) -> None:
        """The next ``times`` requests to ``path`` (e.g. ``f"{PRO}/power_off"``) get an error
        envelope ``{"code": code, "msg": msg}`` in an HTTP 200, without touching the state."""
        self.server.inject(method, path, *[fail(code, msg) for _ in range(times)])

    def status_of(self, uuid: str) -> str:
        return self.instances[uuid].item["status"]

    # -- internals ----------------------------------------------------------------------

    def _authorized(self, req: RecordedRequest, token: str) -> bool:
        return req.header("Authorization") == token

    def _unauthorized(self) -> Reply:
        return fail("AuthorizeFailed", "token无效,请重新获取开发者Token", status=401)

    def _tick(self, inst: FakeInstance) -> None:
        if inst.target is None:
            return
        inst.reads_left -= 1
        if inst.reads_left <= 0:
            inst.item["status"] = inst.target
            inst.target = None

    def _move(self, uuid: str, inst: FakeInstance, via: str, target: str) -> None:
        self.transitions.append((uuid, inst.item["status"], via))
        inst.item["status"] = via
        inst.target = target
        inst.reads_left = self.transition_reads
        if self.transition_reads <= 0:
            inst.item["status"] = target
            inst.target = None

    def _routes(self) -> None:
        s = self.server
        s.route("POST", f"{PRO}/list", self._pro_list)
        s.route("GET", f"{PRO}/status", self._pro_status)
        s.route("GET", f"{PRO}/snapshot", self._pro_snapshot)
        s.route("POST", f"{PRO}/power_on", self._pro_power_on)
        s.route("POST", f"{PRO}/power_off", self._pro_power_off)
        s.route("POST", f"{PRO}/release", self._pro_release)
        s.route("POST", f"{PRO}/create", self._pro_create)
        s.route("POST", "/api/v1/dev/wallet/balance", self._balance)
        s.route("POST", "/api/v1/dev/machine/region/gpu_stock", self._stock)
        s.route("POST", "/api/v1/instance", self._console_list)
        s.route("POST", "/api/v1/instance/power_on", self._console_power_on)
        s.route("POST", "/api/v1/instance/power_off", self._console_power_off)

    def _pro(self, req: RecordedRequest) -> tuple[str, FakeInstance | None]:
        if req.method == "GET":
            uuid = (req.query.get("instance_uuid") or [""])[0]
        else:
            uuid = str((req.json() or {}).get("instance_uuid", ""))
        return uuid, self.instances.get(uuid)

    def _pro_list(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        if "page_index" not in body or "page_size" not in body:
            return fail("RequestParameterIsWrong", "请求参数错误")
        with self._lock:
            for inst in self.instances.values():
                self._tick(inst)
            items = [copy.deepcopy(i.item) for i in self.instances.values()]
        size = int(body["page_size"])
        page = int(body["page_index"])
        max_page = max(1, -(-len(items) // size))
        chunk = items[(page - 1) * size: page * size]
        return ok({"list": chunk, "page_index": page, "page_size": size, "max_page": max_page,
                   "offset": (page - 1) * size, "result_total": len(items)})

    def _pro_status(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        if req.body:
            return fail("RequestParameterIsWrong", "请求参数错误")
        with self._lock:
            uuid, inst = self._pro(req)
            if inst is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            self._tick(inst)
            return ok(inst.item["status"])

    def _pro_snapshot(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        with self._lock:
            uuid, inst = self._pro(req)
            if inst is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            return ok(copy.deepcopy(inst.snapshot))

    def _pro_power_on(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        with self._lock:
            uuid, inst = self._pro(req)
            if inst is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            if (req.json() or {}).get("payload") != "gpu":
                return fail("RequestParameterIsWrong", "请求参数错误")
            if inst.item["status"] == "shutdown":
                self._move(uuid, inst, "starting", "running")
            return ok({"description": "开机指令已下发,请稍后关注实例最新状态"})

    def _pro_power_off(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        with self._lock:
            uuid, inst = self._pro(req)
            if inst is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            if inst.item["status"] not in ("running", "starting"):
                return fail("InstanceStatusNotAllowed", "当前实例状态不允许该操作")
            if self.ignore_stops:
                return ok(None)
            self._move(uuid, inst, "shutting_down", "shutdown")
            delay, self._delay_power_off = self._delay_power_off, 0.0
        reply = ok(None)
        reply.delay = delay
        return reply

    def _pro_release(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        with self._lock:
            uuid, inst = self._pro(req)
            if inst is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            if inst.item["status"] != "shutdown":
                return fail("InstanceStatusNotAllowed", "请先关机再释放实例")
            self.transitions.append((uuid, "shutdown", "released"))
            del self.instances[uuid]
            return ok(None)

    def _pro_create(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        required = ("req_gpu_amount", "expand_system_disk_by_gb", "gpu_spec_uuid", "image_uuid", "cuda_v_from")
        if any(k not in body for k in required):
            return fail("RequestParameterIsWrong", "请求参数错误")
        with self._lock:
            self.created += 1
            uuid = f"pro-{76419909953 + self.created:012x}"
            self.instances[uuid] = FakeInstance(
                pro_list_item(uuid, "creating", req_gpu_amount=body["req_gpu_amount"],
                              gpu_spec_uuid=body["gpu_spec_uuid"]),
                pro_snapshot(),
            )
            return ok(uuid)

    def _balance(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        return ok({"assets": self.balance_milli, "accumulate": 3_400_000, "voucher_balance": 5_000})

    def _stock(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        stock = [{"RTX 4090": {"idle_gpu_num": 3, "total_gpu_num": 9}},
                 {"RTX 3090": {"idle_gpu_num": 1, "total_gpu_num": 5}}]
        names = body.get("gpu_name_set")
        if names:
            stock = [e for e in stock if next(iter(e)) in names]
        return ok(stock)

    def _console_list(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, CONSOLE_TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        with self._lock:
            items = [copy.deepcopy(i) for i in self.console_instances.values()]
        return ok({"list": items, "page_index": body.get("page_index", 1), "page_size": body.get("page_size", 10),
                   "max_page": 1, "offset": 0, "result_total": len(items)})

    def _console_power_on(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, CONSOLE_TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        with self._lock:
            item = self.console_instances.get(str(body.get("instance_uuid")))
            if item is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            if body.get("payload") not in ("gpu", "non_gpu"):
                return fail("RequestParameterIsWrong", "请求参数错误")
            self.transitions.append((item["uuid"], item["status"], "running"))
            item.update(status="running", start_mode=body["payload"])
            return ok(None)

    def _console_power_off(self, req: RecordedRequest) -> Reply:
        if not self._authorized(req, CONSOLE_TOKEN):
            return self._unauthorized()
        body = req.json() or {}
        with self._lock:
            item = self.console_instances.get(str(body.get("instance_uuid")))
            if item is None:
                return fail("RecordNotFoundError", "未查询到相关实例")
            self.transitions.append((item["uuid"], item["status"], "shutdown"))
            item["status"] = "shutdown"
            return ok(None)
