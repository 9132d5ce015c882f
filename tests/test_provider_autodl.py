"""AutoDL adapter against the fake AutoDL API (real HTTP on 127.0.0.1, fresh port per test)."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.errors import ConfigError, ProviderError
from costctl.money import Money
from costctl_providers._http import (
    AuthError,
    NotFoundError,
    ProviderResponseError,
    ProviderUnavailableError,
    StatusWaitError,
)
from costctl_providers.autodl import AutoDLProvider, GpuStock
from costctl_providers.autodl.normalize import STATUS_TABLE, map_status, parse_time, yuan_from_milli
from costctl_providers.base import BillingMode, Status
from costctl_providers.registry import get_provider
from tests.fakes.autodl import CONSOLE_TOKEN, PRO, TOKEN, FakeAutoDL, fail
from tests.fakes.http import Reply

ID = "pro-76419909953e"


@pytest.fixture
def fake():
    with FakeAutoDL() as f:
        f.add_pro(ID)
        yield f


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(fake: FakeAutoDL, tmp_path: Path, sleeps: list[float], *, token: str | None = TOKEN, **table) -> AutoDLProvider:
    config = {"base_url": fake.url, "console_url": fake.url, "poll_interval": 0.01, "stop_timeout": 5,
              "timeout": 2, "backoff": 0.01, **table}
    env = {"AUTODL_TOKEN": token} if token else {}
    if table.get("console_api"):
        env["AUTODL_CONSOLE_TOKEN"] = CONSOLE_TOKEN
    return AutoDLProvider(config, data_dir=tmp_path, env=env, sleep=sleeps.append,
                          hostname=lambda: "laptop", run_command=_never_run)


def _never_run(argv):  # pragma: no cover - a test failing here means the adapter ran a command
    raise AssertionError(f"the adapter ran {argv!r}")


# ----------------------------------------------------------------------------- list / price


def test_list_sends_documented_requests_and_normalizes_price(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    [inst] = p.list_instances()

    listed = fake.server.last("POST", f"{PRO}/list")
    assert listed.header("Authorization") == TOKEN  # the token itself, no "Bearer"
    assert listed.json() == {"page_index": 1, "page_size": 100}
    snap = fake.server.last("GET", f"{PRO}/snapshot")
    assert snap.query == {"instance_uuid": [ID]} and snap.body == b""
    assert snap.header("Authorization") == TOKEN

    assert inst.provider == "autodl" and inst.id == ID
    assert inst.price_per_hour == Decimal("1.88") and inst.currency == "CNY"  # 1880 厘 -> ¥1.88/h
    assert inst.billing is BillingMode.ON_DEMAND
    assert inst.status is Status.RUNNING and inst.status_raw == "running"
    assert inst.gpu_raw == "RTX PRO 6000" and inst.gpu_count == 1
    assert inst.region == "西北企业区"
    assert inst.started_at == datetime(2026, 3, 1, 1, 0, 5, tzinfo=timezone.utc)
    assert inst.stopped_at is None  # {"Valid": false}
    flat = repr(inst.raw)
    assert "s3cr3t-root-pw" not in flat and "jt-0123456789abcdef" not in flat and "ssh -p" not in flat
    assert inst.raw["payg_price"] == 1880
    assert fake.server.unexpected() == []


def test_list_paginates(fake, tmp_path, sleeps):
    for n in range(3):
        fake.add_pro(f"pro-00000000000{n}", payg_price=1000 + n)
    p = make(fake, tmp_path, sleeps, page_size=2)
    ids = [i.id for i in p.list_instances()]
    assert ids == [ID, "pro-000000000000", "pro-000000000001", "pro-000000000002"]
    pages = [r.json()["page_index"] for r in fake.server.calls("POST", f"{PRO}/list")]
    assert pages == [1, 2]


@pytest.mark.parametrize(
    ("milli", "yuan"),
    [(1880, Decimal("1.88")), (100, Decimal("0.1")), (0, Decimal(0)), (123456, Decimal("123.456")), (None, None), ("x", None)],
)
def test_milli_yuan(milli, yuan):
    assert yuan_from_milli(milli) == yuan


def test_prepaid_instance_has_no_hourly_price(fake, tmp_path, sleeps):
    fake.add_pro("pro-prepaid00001", charge_type="monthly")
    p = make(fake, tmp_path, sleeps)
    inst = {i.id: i for i in p.list_instances()}["pro-prepaid00001"]
    assert inst.billing is BillingMode.PREPAID and inst.price_per_hour is None


# ----------------------------------------------------------------------------- status mapping


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("creating", Status.PROVISIONING),
        ("starting", Status.STARTING),
        ("running", Status.RUNNING),
        ("shutting_down", Status.STOPPING),
        ("shutdown", Status.STOPPED),
        ("re_initializing", Status.STARTING),
        ("released", Status.TERMINATED),
        ("migrating", Status.UNKNOWN),
        ("", Status.UNKNOWN),
        (None, Status.UNKNOWN),
        (42, Status.UNKNOWN),
    ],
)
def test_status_table(raw, status):
    assert map_status(raw) is status


def test_every_table_entry_is_a_status():
    assert all(isinstance(v, Status) for v in STATUS_TABLE.values())


def test_unknown_provider_state_does_not_crash(fake, tmp_path, sleeps):
    fake.add_pro("pro-weird0000001", status="hibernating")
    p = make(fake, tmp_path, sleeps)
    inst = {i.id: i for i in p.list_instances()}["pro-weird0000001"]
    assert inst.status is Status.UNKNOWN and inst.status_raw == "hibernating"


def test_times_without_offset_are_china_time():
    assert parse_time("2026-03-01 09:00:00") == datetime(2026, 3, 1, 1, 0, tzinfo=timezone.utc)
    assert parse_time({"Time": "2026-03-01T09:00:00+08:00", "Valid": False}) is None
    assert parse_time("not a time") is None


# ----------------------------------------------------------------------------- stop / start


def test_stop_powers_off_and_waits_for_shutdown(fake, tmp_path, sleeps):
    fake.transition_reads = 2
    p = make(fake, tmp_path, sleeps)
    p.list_instances()
    inst = p.stop_instance(ID)

    off = fake.server.last("POST", f"{PRO}/power_off")
    assert off.json() == {"instance_uuid": ID} and off.header("Authorization") == TOKEN
    assert inst.status is Status.STOPPED and inst.status_raw == "shutdown"
    assert inst.price_per_hour == Decimal("1.88")  # the record keeps the listed price
    assert fake.transitions == [(ID, "running", "shutting_down")]
    status_reads = fake.server.calls("GET", f"{PRO}/status")
    assert all(r.query == {"instance_uuid": [ID]} for r in status_reads)
    assert 0.01 in sleeps  # polled at poll_interval
    assert fake.server.unexpected() == []


def test_stop_is_idempotent_on_a_stopped_instance(fake, tmp_path, sleeps):
    fake.add_pro("pro-off000000001", status="shutdown")
    p = make(fake, tmp_path, sleeps)
    inst = p.stop_instance("pro-off000000001")
    assert inst.status is Status.STOPPED
    assert fake.server.count("POST", f"{PRO}/power_off") == 0


def test_stop_without_wait_returns_stopping(fake, tmp_path, sleeps):
    fake.transition_reads = 5
    p = make(fake, tmp_path, sleeps)
    inst = p.stop_instance(ID, wait=False)
    assert inst.status is Status.STOPPING


def test_stop_gives_up_after_stop_timeout(fake, tmp_path, sleeps):
    fake.transition_reads = 10**9
    p = make(fake, tmp_path, sleeps, stop_timeout=0.2)
    with pytest.raises(StatusWaitError, match="still stopping"):
        p.stop_instance(ID)


def test_start_powers_on_with_gpu_payload(fake, tmp_path, sleeps):
    fake.add_pro("pro-off000000002", status="shutdown")
    p = make(fake, tmp_path, sleeps)
    inst = p.start_instance("pro-off000000002")
    on = fake.server.last("POST", f"{PRO}/power_on")
    assert on.json() == {"instance_uuid": "pro-off000000002", "payload": "gpu"}
    assert inst.status in (Status.STARTING, Status.RUNNING)
    p.start_instance(ID)  # already running: no call
    assert fake.server.count("POST", f"{PRO}/power_on") == 1


def test_5xx_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_5xx("POST", f"{PRO}/power_off", status=503)
    inst = p.stop_instance(ID)
    assert inst.status is Status.STOPPED
    assert fake.server.count("POST", f"{PRO}/power_off") == 2
    assert fake.transitions == [(ID, "running", "shutting_down")]


def test_timeout_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, timeout=0.3)
    fake.delay_next_power_off(2.0)  # carried out, but answered after the client gave up
    inst = p.stop_instance(ID)
    assert inst.status is Status.STOPPED
    assert fake.server.count("POST", f"{PRO}/power_off") == 2  # the timed-out call and the retry
    assert fake.transitions == [(ID, "running", "shutting_down")]


# ----------------------------------------------------------------------------- create / release


def test_create_sends_documented_body(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    inst = p.create_instance(gpu_spec_uuid="pro6000-p", image_uuid="image-db8346e037", cuda_v_from=118,
                             req_gpu_amount=2, instance_name="exp")
    body = fake.server.last("POST", f"{PRO}/create").json()
    assert body == {"req_gpu_amount": 2, "expand_system_disk_by_gb": 0, "gpu_spec_uuid": "pro6000-p",
                    "image_uuid": "image-db8346e037", "cuda_v_from": 118, "instance_name": "exp"}
    assert inst.id.startswith("pro-") and inst.status is Status.PROVISIONING and inst.gpu_count == 2


def test_create_is_never_retried_on_5xx(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_5xx("POST", f"{PRO}/create", status=503)
    with pytest.raises(ProviderUnavailableError):
        p.create_instance(gpu_spec_uuid="pro6000-p", image_uuid="image-x", cuda_v_from=118)
    assert fake.server.count("POST", f"{PRO}/create") == 1
    assert fake.created == 0


def test_create_timeout_is_not_retried_and_says_it_may_exist(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, timeout=0.3)
    fake.server.inject_delay("POST", f"{PRO}/create", 2.0)
    with pytest.raises(ProviderUnavailableError, match="may have been carried out"):
        p.create_instance(gpu_spec_uuid="pro6000-p", image_uuid="image-x", cuda_v_from=118)
    assert fake.server.count("POST", f"{PRO}/create") == 1


def test_release_powers_off_first(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    inst = p.release_instance(ID)
    assert inst.status is Status.TERMINATED
    assert [r.route for r in fake.server.calls("POST")][-1] == f"{PRO}/release"
    assert fake.transitions == [(ID, "running", "shutting_down"), (ID, "shutdown", "released")]
    assert ID not in fake.instances


# ----------------------------------------------------------------------------- errors


def test_401_names_the_credential_without_printing_it(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, token="wrong-token-abcdef")
    with pytest.raises(AuthError) as err:
        p.list_instances()
    assert "AUTODL_TOKEN" in str(err.value)
    assert "wrong-token-abcdef" not in str(err.value)
    assert fake.server.count("POST", f"{PRO}/list") == 1  # a 401 is not retried


def test_envelope_error_is_typed_with_its_message(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    with pytest.raises(NotFoundError, match="未查询到相关实例"):
        p.stop_instance("pro-doesnotexist")
    fake.server.inject("POST", f"{PRO}/create", fail("InternalError", "当前算力规格暂无库存, 请修改配置或稍等再试"))
    with pytest.raises(ProviderResponseError, match=r"暂无库存.*code InternalError"):
        p.create_instance(gpu_spec_uuid="pro6000-p", image_uuid="image-x", cuda_v_from=118)


def test_malformed_json_is_a_response_error(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_malformed_json("POST", f"{PRO}/list")
    with pytest.raises(ProviderResponseError, match="malformed JSON"):
        p.list_instances()


def test_429_with_retry_after_is_retried(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_429("POST", f"{PRO}/list", retry_after=2)
    assert [i.id for i in p.list_instances()] == [ID]
    assert 2.0 in sleeps and fake.server.count("POST", f"{PRO}/list") == 2


def test_missing_token_is_a_config_error(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, token=None)
    with pytest.raises(ConfigError, match="AUTODL_TOKEN"):
        p.list_instances()
    assert fake.server.calls() == []


# ----------------------------------------------------------------------------- account


def test_balance_is_cny(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    assert p.balance() == Money(Decimal("123.45"), "CNY")
    req = fake.server.last("POST", "/api/v1/dev/wallet/balance")
    assert req.header("Authorization") == TOKEN


def test_gpu_stock(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    assert p.gpu_stock("westDC2", gpu_names=["RTX 4090"]) == [GpuStock("RTX 4090", 3, 9, "westDC2")]
    assert fake.server.last("POST", "/api/v1/dev/machine/region/gpu_stock").json() == {
        "region_sign": "westDC2", "gpu_name_set": ["RTX 4090"]}


def test_capabilities():
    caps = AutoDLProvider.capabilities
    assert not caps.spot and not caps.change_gpu and not caps.offers
    assert caps.stop and caps.start and caps.release and caps.balance


# ----------------------------------------------------------------------------- web console


def test_console_is_opt_in(fake, tmp_path, sleeps):
    fake.add_console("c0ffee1234-5678abcd")
    p = make(fake, tmp_path, sleeps)
    assert [i.id for i in p.list_instances()] == [ID]
    with pytest.raises(ProviderError, match="console_api = true"):
        p.stop_instance("c0ffee1234-5678abcd")
    assert fake.server.count("POST", "/api/v1/instance") == 0


def test_console_list_stop_and_no_gpu_start(fake, tmp_path, sleeps):
    fake.add_console("c0ffee1234-5678abcd")
    fake.add_console("dada000000-prepaid0", charge_type="weekly")
    p = make(fake, tmp_path, sleeps, console_api=True)
    listed = {i.id: i for i in p.list_instances()}
    req = fake.server.last("POST", "/api/v1/instance")
    assert req.header("Authorization") == CONSOLE_TOKEN
    assert req.json() == {"page_index": 1, "page_size": 100, "status": []}
    ordinary = listed["c0ffee1234-5678abcd"]
    assert ordinary.price_per_hour == Decimal("2.58") and ordinary.currency == "CNY"
    assert ordinary.billing is BillingMode.ON_DEMAND and "console-root-pw" not in repr(ordinary.raw)
    assert listed["dada000000-prepaid0"].billing is BillingMode.PREPAID

    stopped = p.stop_instance("c0ffee1234-5678abcd")
    assert stopped.status is Status.STOPPED
    assert fake.server.last("POST", "/api/v1/instance/power_off").json() == {"instance_uuid": "c0ffee1234-5678abcd"}

    started = p.start_without_gpu("c0ffee1234-5678abcd")
    assert fake.server.last("POST", "/api/v1/instance/power_on").json() == {
        "instance_uuid": "c0ffee1234-5678abcd", "payload": "non_gpu"}
    assert started.status is Status.RUNNING
    assert started.gpu_count == 0 and started.price_per_hour == Decimal("0.10")
    with pytest.raises(ProviderError, match="no-GPU"):
        p.start_without_gpu(ID)


# ----------------------------------------------------------------------------- inside the container


def test_detect_self_from_hostname(tmp_path):
    p = AutoDLProvider({}, data_dir=tmp_path, env={}, hostname=lambda: "autodl-container-7c8a11a4a1-3e0b7d2c")
    assert p.detect_self() == "7c8a11a4a1-3e0b7d2c"
    assert AutoDLProvider({}, data_dir=tmp_path, env={}, hostname=lambda: "gpu-box").detect_self() is None


def test_stop_self_without_token_runs_shutdown(fake, tmp_path, sleeps):
    ran: list[list[str]] = []
    p = AutoDLProvider(
        {"base_url": fake.url, "shutdown_command": ["/usr/bin/true", "shutdown"]}, data_dir=tmp_path, env={},
        hostname=lambda: "autodl-container-7c8a11a4a1-3e0b7d2c", run_command=lambda argv: ran.append(list(argv)) or 0,
    )
    inst = p.stop_instance("7c8a11a4a1-3e0b7d2c")
    assert ran == [["/usr/bin/true", "shutdown"]]
    assert inst.status is Status.STOPPING and inst.id == "7c8a11a4a1-3e0b7d2c"
    assert fake.server.calls() == []


def test_stop_self_failure_is_one_line(tmp_path):
    p = AutoDLProvider({}, data_dir=tmp_path, env={}, hostname=lambda: "autodl-container-abc-def",
                       run_command=lambda argv: 1)
    with pytest.raises(ProviderError, match="exited with status 1"):
        p.stop_instance("abc-def")


def test_with_token_self_stop_uses_the_api(fake, tmp_path, sleeps):
    p = AutoDLProvider({"base_url": fake.url, "poll_interval": 0.01}, data_dir=tmp_path, env={"AUTODL_TOKEN": TOKEN},
                       hostname=lambda: f"autodl-container-{ID}", run_command=_never_run, sleep=sleeps.append)
    assert p.stop_instance(ID).status is Status.STOPPED
    assert fake.server.count("POST", f"{PRO}/power_off") == 1


# ----------------------------------------------------------------------------- config / registry


def test_unknown_config_key_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        AutoDLProvider({"base_ulr": "https://x"}, data_dir=tmp_path)
    assert str(err.value) == "[providers.autodl] unknown key 'base_ulr'"


def test_bad_config_value_names_key(tmp_path):
    with pytest.raises(ConfigError, match=r"timeout = -1"):
        AutoDLProvider({"timeout": -1}, data_dir=tmp_path)


def test_credentials_file_token_and_registry(fake, tmp_path, sleeps, monkeypatch):
    monkeypatch.delenv("AUTODL_TOKEN", raising=False)
    creds = tmp_path / "credentials.toml"
    creds.write_text(f'[autodl]\ntoken = "{TOKEN}"\n')
    creds.chmod(0o600)
    p = get_provider("autodl", {"base_url": fake.url}, data_dir=tmp_path)
    assert isinstance(p, AutoDLProvider)
    assert [i.id for i in p.list_instances()] == [ID]
    creds.write_text('[autodl]\ntoken = "wrong-token-from-file"\n')
    with pytest.raises(AuthError) as err:
        get_provider("autodl", {"base_url": fake.url}, data_dir=tmp_path).list_instances()
    assert "credentials file" in str(err.value) and "wrong-token-from-file" not in str(err.value)


def test_error_envelope_after_stop_with_running_instance_is_raised(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject("POST", f"{PRO}/power_off", fail("PowerOffFailed", "关机失败"))  # a permanent code
    with pytest.raises(ProviderResponseError, match="power_off failed after 1 attempt: .*关机失败"):
        p.stop_instance(ID)
    assert fake.status_of(ID) == "running"
    assert fake.server.count("POST", f"{PRO}/power_off") == 1


def test_persistent_transient_envelope_on_stop_is_raised_with_the_attempts(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, retries=2)
    fake.server.inject("POST", f"{PRO}/power_off", *[fail("InternalError", "关机失败") for _ in range(5)])
    with pytest.raises(ProviderUnavailableError, match="autodl: power_off failed after 3 attempts: .*关机失败") as err:
        p.stop_instance(ID)
    assert err.value.attempts == 3
    assert fake.server.count("POST", f"{PRO}/power_off") == 3
    assert fake.status_of(ID) == "running"


def test_unexpected_request_gets_400(fake):
    import requests

    assert requests.get(fake.url + "/nope", timeout=2).status_code == 400
    assert len(fake.server.unexpected()) == 1


def test_reply_helper_round_trip():
    assert Reply.json({"a": 1}).status == 200
