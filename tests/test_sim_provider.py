"""The simulated provider: instances, transitions, preemptions, offers, and its shared state file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.clock import SimClock
from costctl.errors import ConfigError, ProviderError
from costctl_providers._http import NotFoundError
from costctl_providers.base import BillingMode, Status
from costctl_providers.sim import SimProvider


def sim(tmp_path: Path, clock: SimClock | None = None, **config) -> SimProvider:
    return SimProvider(config, data_dir=tmp_path, clock=clock or SimClock())


def test_default_local_instance(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock)
    assert p.detect_self() == "sim-local"
    inst = p.get_instance("sim-local")
    assert (inst.gpu, inst.gpu_count, inst.price_per_hour, inst.currency) == ("RTX 4090", 1, Decimal("0.69"), "USD")
    assert inst.billing is BillingMode.ON_DEMAND and inst.status is Status.RUNNING
    assert inst.started_at == clock.now() and inst.started_at.tzinfo is not None
    assert isinstance(inst.price_per_hour, Decimal)
    assert (tmp_path / "sim" / "state.json").is_file()


def test_config_overrides(tmp_path):
    p = sim(tmp_path, gpu="A100 80GB", gpu_count=2, price_per_hour="3.50", currency="cny", billing="spot",
            instance_id="box-1")
    assert p.detect_self() == "box-1"
    inst = p.get_instance("box-1")
    assert (inst.gpu, inst.gpu_count, inst.price_per_hour, inst.currency, inst.billing) == (
        "A100 80GB", 2, Decimal("3.50"), "CNY", BillingMode.SPOT)


def test_price_defaults_from_the_table_times_gpu_count(tmp_path):
    assert sim(tmp_path, gpu="H100 80GB", gpu_count=4).get_instance("sim-local").price_per_hour == Decimal("11.96")
    assert sim(tmp_path / "b", billing="spot").get_instance("sim-local").price_per_hour == Decimal("0.35")


def test_float_price_does_not_drift(tmp_path):
    assert sim(tmp_path, price_per_hour=0.1).get_instance("sim-local").price_per_hour == Decimal("0.1")


@pytest.mark.parametrize("config,match", [
    ({"gpus": 2}, "unknown key 'gpus'"),
    ({"gpu_count": 0}, "providers.sim.gpu_count"),
    ({"billing": "free"}, "providers.sim.billing"),
    ({"price_per_hour": "-1"}, "providers.sim.price_per_hour"),
    ({"currency": "dollars"}, "providers.sim.currency"),
])
def test_bad_config(tmp_path, config, match):
    with pytest.raises(ConfigError, match=match):
        SimProvider(config, data_dir=tmp_path)


def test_unknown_gpu_without_price_is_a_config_error(tmp_path):
    p = sim(tmp_path, gpu="Voodoo 2")
    with pytest.raises(ConfigError, match="no simulated USD price for 'Voodoo 2'; set price_per_hour"):
        p.detect_self()
    assert sim(tmp_path, gpu="Voodoo 2", price_per_hour="0.05").get_instance("sim-local").gpu == "Voodoo 2"


def test_transitions_on_the_clock(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock, transition_s=10)
    assert p.stop_instance("sim-local", wait=False).status is Status.STOPPING
    clock.advance(9)
    assert p.get_instance("sim-local").status is Status.STOPPING
    clock.advance(1)
    inst = p.get_instance("sim-local")
    assert inst.status is Status.STOPPED and inst.stopped_at == clock.now()

    started = p.start_instance("sim-local")
    assert started.status is Status.STARTING and started.started_at is None and started.stopped_at is None
    clock.advance(10)
    inst = p.get_instance("sim-local")
    assert inst.status is Status.RUNNING and inst.started_at == clock.now()


def test_stop_waits_until_stopped(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock, transition_s=8)
    t0 = clock.now()
    inst = p.stop_instance("sim-local")  # wait=True: a SimClock is advanced, not slept on
    assert inst.status is Status.STOPPED
    assert clock.now() - t0 >= timedelta(seconds=8) and inst.stopped_at == t0 + timedelta(seconds=8)


def test_start_stop_release_are_idempotent(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock)
    assert p.start_instance("sim-local").status is Status.RUNNING  # already running: no-op
    first = p.stop_instance("sim-local")
    clock.advance(60)
    again = p.stop_instance("sim-local")
    assert again.status is Status.STOPPED and again.stopped_at == first.stopped_at  # nothing changed
    assert p.release_instance("sim-local").status is Status.TERMINATED
    clock.advance(60)
    assert p.release_instance("sim-local").status is Status.TERMINATED
    assert p.stop_instance("sim-local").status is Status.TERMINATED
    with pytest.raises(ProviderError, match="was released"):
        p.start_instance("sim-local")


def test_release_of_running_instance_records_its_end(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock)
    p.detect_self()
    clock.advance(3600)
    inst = p.release_instance("sim-local")
    assert inst.status is Status.TERMINATED and inst.stopped_at - inst.started_at == timedelta(hours=1)


def test_detect_self_recreates_a_released_local_instance(tmp_path):
    p = sim(tmp_path)
    p.release_instance("sim-local")
    assert p.detect_self() == "sim-local"
    assert p.get_instance("sim-local").status is Status.RUNNING


def test_unknown_instance(tmp_path):
    with pytest.raises(NotFoundError, match="no instance 'nope'"):
        sim(tmp_path).get_instance("nope")


def test_preemption_notice_then_stopped(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock, billing="spot")
    p.inject_preemption("sim-local", notice_s=120)
    notice = p.preemption_notice("sim-local")
    assert notice is not None and notice.source == "sim" and notice.action == "terminate"
    assert notice.deadline == clock.now() + timedelta(seconds=120)
    clock.advance(119)
    assert p.get_instance("sim-local").status is Status.RUNNING
    clock.advance(1)
    inst = p.get_instance("sim-local")
    assert inst.status is Status.STOPPED and inst.status_raw == "preempted" and inst.preempted
    assert inst.stopped_at == notice.deadline
    assert p.preemption_notice("sim-local") is None
    # started again, it is no longer marked preempted
    assert not p.start_instance("sim-local").preempted


def test_preemption_after_the_fact(tmp_path):
    p = sim(tmp_path, billing="spot")
    inst = p.inject_preemption("sim-local", notice_s=0)
    assert inst.status is Status.STOPPED and inst.preempted
    assert p.preemption_notice("sim-local") is None


def test_on_demand_instances_are_not_preempted(tmp_path):
    with pytest.raises(ProviderError, match="only spot instances are preempted"):
        sim(tmp_path).inject_preemption("sim-local")


def test_a_stop_cancels_a_pending_preemption(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock, billing="spot")
    p.inject_preemption("sim-local", notice_s=60)
    p.stop_instance("sim-local")
    clock.advance(120)
    inst = p.get_instance("sim-local")
    assert inst.status is Status.STOPPED and not inst.preempted


def test_offers_from_the_price_table(tmp_path):
    offers = sim(tmp_path).list_offers("4090")
    assert offers and all(o.gpu == "RTX 4090" for o in offers)
    assert {o.currency for o in offers} == {"USD", "CNY"}
    assert not [o for o in offers if o.currency == "CNY" and o.billing is BillingMode.SPOT]
    four = next(o for o in offers if o.currency == "USD" and o.billing is BillingMode.ON_DEMAND and o.gpu_count == 4)
    assert four.price_per_hour == Decimal("2.76") and four.price_per_gpu_hour == Decimal("0.69")
    assert four.gpu_memory_bytes == 24 * 2**30
    assert sim(tmp_path).list_offers("voodoo") == []
    assert len(sim(tmp_path).list_offers()) > len(offers)


def test_create_change_gpu(tmp_path):
    clock = SimClock()
    p = sim(tmp_path, clock, transition_s=5)
    a = p.create_instance("RTX 3090", gpu_count=2)
    assert a.id == "sim-1" and a.status is Status.STARTING and a.price_per_hour == Decimal("0.88")
    b = p.create_instance("A100 80GB", billing="spot", bid_per_hour=Decimal("1.20"))
    assert b.id == "sim-2" and b.billing is BillingMode.SPOT and b.bid_per_hour == Decimal("1.20")
    with pytest.raises(ProviderError, match="below the minimum"):
        p.create_instance("A100 80GB", billing="spot", bid_per_hour=Decimal("0.50"))
    with pytest.raises(ProviderError, match="no spot market"):
        p.create_instance("RTX 4090", billing="spot", currency="CNY")
    with pytest.raises(ProviderError, match="stop it before changing"):
        p.change_gpu("sim-1", "RTX 4090")
    p.stop_instance("sim-1")
    moved = p.change_gpu("sim-1", "rtx-4090")
    assert (moved.gpu, moved.gpu_count, moved.price_per_hour) == ("RTX 4090", 2, Decimal("1.38"))
    assert [i.id for i in p.list_instances()] == ["sim-1", "sim-2", "sim-local"]


def test_capabilities():
    caps = SimProvider.capabilities
    assert caps.spot and caps.change_gpu and caps.offers and caps.preemption_notice
    assert caps.stop and caps.start and caps.release


def test_state_is_json_written_atomically(tmp_path):
    p = sim(tmp_path)
    p.stop_instance("sim-local")
    state = json.loads((tmp_path / "sim" / "state.json").read_text())
    assert state["instances"]["sim-local"]["status"] == "stopped"
    assert state["instances"]["sim-local"]["price_per_hour"] == "0.69"  # Decimal kept as a string
    leftovers = [f.name for f in (tmp_path / "sim").iterdir() if f.name not in {"state.json", "state.json.lock"}]
    assert leftovers == []


def test_corrupt_state_file(tmp_path):
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "state.json").write_text("{not json")
    with pytest.raises(ProviderError, match="corrupt; delete it to reset"):
        sim(tmp_path).list_instances()


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from costctl_providers.sim import SimProvider
    p = SimProvider({}, data_dir=Path(sys.argv[1]))
    action = sys.argv[2]
    if action == "stop":
        print(p.stop_instance("sim-local").status.value)
    elif action == "create":
        for _ in range(int(sys.argv[3])):
            p.create_instance("RTX 3090")
""")


def run_child(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=60)


def test_state_is_shared_with_another_process(tmp_path):
    p = SimProvider({}, data_dir=tmp_path)
    assert p.get_instance("sim-local").status is Status.RUNNING
    done = run_child(str(tmp_path), "stop")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
    assert p.get_instance("sim-local").status is Status.STOPPED


def test_concurrent_processes_lose_no_update(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), "create", "15"], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    ids = [i.id for i in SimProvider({}, data_dir=tmp_path).list_instances() if i.id != "sim-local"]
    assert len(ids) == 45 and len(set(ids)) == 45
