"""Issue 16, part 2: ``costctl init --provider NAME`` writes a config ready for that provider:
each adapter's preset (currency, timezone, the checkpoint path that survives a stop, the
self-stop, the credential) with a comment saying why, the card and its price fallback from the
price table, and the provider's own table. The AutoDL config is accepted as is by a real
``costctl watch`` inside a simulated AutoDL container (hostname, a ``shutdown`` on PATH, no
token): the test fails if the generated config is rejected."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.catalog.prices import load_price_table
from costctl.cli.init import provider_config, set_key
from costctl.cli.main import main
from costctl.config import load_settings
from costctl.i18n import format_amount
from costctl.ledger.schema import Instance as InstanceRow
from costctl.ledger.schema import Run, StopEventRow
from costctl_providers.registry import available_providers, config_preset_of, credential_env, provider_class
from helpers import costctl_env, run_costctl

CONTAINER_ID = "7c8a11a4a1-3e0b7d2c"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("COSTCTL_") and key != "COSTCTL_CONFIG":  # the suite's shield stays
            monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def _init(tmp_path: Path, capsys, *args: str) -> tuple[int, Path, str]:
    path = tmp_path / f"costctl-{len(list(tmp_path.glob('costctl-*.toml')))}.toml"
    code = main(["init", str(path), *args])
    return code, path, capsys.readouterr().err


def _setting(settings, section: str, key: str):
    node = settings
    for part in section.split("."):
        node = getattr(node, part)
    return getattr(node, key)


def _comments(text: str) -> str:
    """The file's comments joined into one line, so a sentence wrapped over lines can be searched."""
    parts = []
    for line in text.splitlines():
        if "#" in line:
            parts.append(line[line.index("#") + 1:].strip())
    return " ".join(parts)


# ----------------------------------------------------------------------------- every adapter


@pytest.mark.parametrize("name", available_providers())
def test_init_writes_a_config_each_adapter_accepts_with_its_choices_explained(tmp_path, capsys, name):
    code, path, err = _init(tmp_path, capsys, "--provider", name)
    assert code == 0, err
    text = path.read_text()
    settings = load_settings(path)  # a ConfigError fails the test: the file is valid as written
    assert settings.instance.provider == name
    assert text.startswith(f"# costctl.toml — configuration for costctl (written by `costctl init --provider {name}`).")
    preset = config_preset_of(name)
    comments = _comments(text)
    for sentence in preset.summary:
        assert sentence in comments
    for k in preset.keys:
        assert k.why in comments, (k.section, k.key)
        if k.value is not None:
            assert _setting(settings, k.section, k.key) == k.value, (k.section, k.key)
    # the policies are generated as for a plain init: every key, commented
    assert "[policies.idle]" in text and "# ---- end of [policies.*] ----" in text


@pytest.mark.parametrize("name", [n for n in available_providers() if credential_env(n)])
def test_an_account_provider_gets_its_table_and_credential_hint(tmp_path, capsys, name):
    code, path, err = _init(tmp_path, capsys, "--provider", name)
    assert code == 0, err
    text = path.read_text()
    comments = _comments(text)
    for var in credential_env(name):
        assert var in comments
    assert "credentials.toml" in comments and "chmod 600" in comments
    assert config_preset_of(name).credential_hint in comments
    block = text[text.index(f"# [providers.{name}]\n"):]
    table = tomllib.loads("\n".join(line[2:] for line in block.splitlines() if line.startswith("# ")))
    cls = provider_class(name)
    cls.config_model(**{k: v for k, v in table["providers"][name].items() if v != "..."})  # keys its model accepts
    # no other provider's table is left in the file
    assert [p for p in available_providers() if p != name and f"[providers.{p}]" in text] == []


# ----------------------------------------------------------------------------- AutoDL


def test_the_autodl_config(tmp_path, capsys):
    code, path, err = _init(tmp_path, capsys, "--provider", "autodl")
    assert code == 0, err
    s = load_settings(path)
    assert (s.instance.currency, s.watch.timezone, s.instance.self_stop) == ("CNY", "Asia/Shanghai", "shutdown")
    assert s.instance.id is None  # detected from the container's hostname
    assert s.catalog.currency == "CNY" and s.instance.billing == "on-demand"
    # checkpoints where the adapter says files survive a stop
    storage = provider_class("autodl").storage
    hit = storage.find(s.checkpoint.path)
    assert hit is not None and hit.survives and not hit.network
    # the card and its price fallback come from the price table
    (row,) = [e for e in load_price_table(None, include_imported=False).lookup(s.instance.gpu, provider="autodl",
                                                                               billing="on-demand")]
    assert s.instance.price_per_hour == row.price_per_gpu_hour and s.instance.gpu_count == 1
    comments = _comments(path.read_text())
    for fact in ("AUTODL_TOKEN", "payg_price", "/root/autodl-tmp", "15 days", "shutdown", "yuan", "Beijing"):
        assert fact in comments, fact


def test_the_card_and_count_set_the_price_fallback(tmp_path, capsys):
    table = load_price_table(None, include_imported=False)
    for gpu in ("A800", "rtx 4090d", "H20-NVLink"):
        code, path, err = _init(tmp_path, capsys, "--provider", "autodl", "--gpu", gpu, "--gpu-count", "4")
        assert code == 0, err
        s = load_settings(path)
        (row,) = table.lookup(s.instance.gpu, provider="autodl", billing="on-demand")
        assert s.instance.gpu_count == 4 and s.instance.price_per_hour == row.price_per_gpu_hour * 4
        shown = format_amount(row.price_per_gpu_hour, "CNY")  # the comment writes money as people read it
        assert shown.startswith("CN¥")
        assert f"4 x {s.instance.gpu} at {shown} per card-hour" in _comments(path.read_text())


def test_a_card_without_a_price_leaves_the_fallback_commented(tmp_path, capsys):
    code, path, err = _init(tmp_path, capsys, "--provider", "vastai", "--gpu", "RTX 4090")
    assert code == 0, err
    s = load_settings(path)
    assert s.instance.gpu == "RTX 4090" and s.instance.price_per_hour is None
    assert "no on-demand USD price for RTX 4090 at vastai" in _comments(path.read_text())


@pytest.mark.parametrize(("args", "needle"), [
    (["--provider", "nosuch"], "unknown provider 'nosuch'; available: "),
    (["--provider", "autodl", "--gpu", "Voodoo 5"], "--gpu 'Voodoo 5' is neither in costctl's GPU catalog"),
    (["--gpu", "A800"], "--gpu and --gpu-count describe the instance of a --provider"),
    (["--provider", "autodl", "--gpu-count", "0"], "--gpu-count"),
])
def test_bad_options_are_one_line_and_write_nothing(tmp_path, capsys, args, needle):
    code, path, err = _init(tmp_path, capsys, *args)
    assert code == 2 and needle in err and "Traceback" not in err
    assert not path.exists()


def test_set_key_refuses_a_key_the_example_does_not_show():
    text = "[instance]\nprovider = \"sim\"\n# id = \"x\"\n[watch]\ntimezone = \"UTC\"\n"
    assert set_key(text, "instance", "id", ['id = "y"']) == "[instance]\nprovider = \"sim\"\nid = \"y\"\n[watch]\ntimezone = \"UTC\"\n"
    with pytest.raises(ValueError, match="no key zone in \\[watch\\]"):
        set_key(text, "watch", "zone", ["zone = 1"])
    with pytest.raises(ValueError, match="no table \\[hooks\\]"):
        set_key(text, "hooks", "before_stop", ["before_stop = 'x'"])
    # a key of the next table is not taken for this one's
    with pytest.raises(ValueError):
        set_key(text, "instance", "timezone", ["timezone = 'x'"])


def test_every_preset_key_is_shown_by_the_example_config():
    """A preset naming a key the example config lost would fail here, not at a user's init."""
    for name in available_providers():
        provider_config(name)


# ----------------------------------------------------------------------------- inside an AutoDL container


def _fake_container_bin(tmp_path: Path) -> tuple[Path, Path]:
    """A ``shutdown`` for the simulated container: records its arguments, then does what
    powering the machine off does to the watch: SIGKILLs its parent."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "shutdown.called"
    script = bin_dir / "shutdown"
    script.write_text(f"#!/bin/sh\necho \"ran $*\" > '{called}'\nkill -9 $PPID\nexit 0\n")
    script.chmod(0o755)
    return bin_dir, called


def test_the_autodl_config_runs_as_is_inside_a_simulated_container(tmp_path, capsys):
    """`costctl init --provider autodl`, then `costctl watch` with that file untouched, in a
    simulated AutoDL container: its hostname (``$AUTODL_CONTAINER_HOSTNAME``, the adapter's
    documented override), no ``AUTODL_TOKEN``, and a ``shutdown`` on PATH standing in for the
    container's. The watch must accept the config, choose the self-stop route, charge the
    configured fallback in CNY, and on ``--on-exit stop`` run the config's ``self_stop``."""
    code, config, err = _init(tmp_path, capsys, "--provider", "autodl")
    assert code == 0, err
    settings = load_settings(config)
    bin_dir, called = _fake_container_bin(tmp_path)
    data = tmp_path / "data"
    env = costctl_env(data, AUTODL_CONTAINER_HOSTNAME=f"autodl-container-{CONTAINER_ID}",
                      PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("AUTODL_TOKEN", None)
    env.pop("AUTODL_CONSOLE_TOKEN", None)
    marker = tmp_path / "job-ran"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran'); print('loss: 0.5')"]
    proc = run_costctl("watch", "--on-exit", "stop", "--config", str(config), "--", *job, env=env, timeout=90)
    out = proc.stderr.decode()
    assert "refusing" not in out and "costctl: error" not in out and "Traceback" not in out, out
    assert proc.returncode == -9, out  # the "machine" powered off under the watch
    assert marker.exists(), "the job ran"
    assert (f"costctl: stop route: self-stop via shutdown (this is autodl instance {CONTAINER_ID}; "
            f"shutdown is {bin_dir / 'shutdown'})") in out
    assert called.read_text().strip() == "ran"  # the config's self_stop, no arguments
    assert "checkpoint path" not in out  # the checkpoint path is on storage that survives the stop
    engine = create_engine(f"sqlite:///{data / 'costctl.db'}")
    with Session(engine) as session:
        inst = session.scalars(select(InstanceRow)).one()
        run = session.scalars(select(Run)).one()
        events = session.scalars(select(StopEventRow).order_by(StopEventRow.id)).all()
    assert (inst.provider, inst.provider_instance_id, inst.currency) == ("autodl", CONTAINER_ID, "CNY")
    assert (run.price_per_hour, run.price_currency) == (settings.instance.price_per_hour, "CNY")
    assert [e.state for e in events] == ["requested", "self-stop sent"]
    assert run.status == "self-stop sent"


def test_a_checkpoint_path_moved_off_the_data_disk_is_warned_about(tmp_path, capsys):
    """The same file with the checkpoint path moved by the environment to a temporary directory
    (standing in for a path off /root/autodl-tmp): the watch still runs, and says the checkpoints
    would not survive a shutdown; the file's own path draws no such warning (above)."""
    code, config, err = _init(tmp_path, capsys, "--provider", "autodl")
    assert code == 0, err
    bin_dir, called = _fake_container_bin(tmp_path)
    moved = tmp_path / "scratch" / "checkpoints"
    env = costctl_env(tmp_path / "data", AUTODL_CONTAINER_HOSTNAME=f"autodl-container-{CONTAINER_ID}",
                      PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", COSTCTL_CHECKPOINT__PATH=str(moved))
    env.pop("AUTODL_TOKEN", None)
    proc = run_costctl("watch", "--on-exit", "leave", "--config", str(config), "--",
                       sys.executable, "-c", "print('loss: 0.5')", env=env, timeout=90)
    out = proc.stderr.decode()
    assert proc.returncode == 0, out
    assert f"checkpoint path {moved} is outside /root/autodl-tmp" in out
    assert not called.exists()  # --on-exit leave: nothing stopped


def test_the_adapters_hostname_override_tells_its_storage_too():
    """AutoDL's ``$AUTODL_CONTAINER_HOSTNAME`` (the hostname the adapter recognises a container
    by) also tells the checkpoint-storage rules that this is an AutoDL container."""
    from costctl.checkpoint import ephemeral_storage_warning

    inside = {"AUTODL_CONTAINER_HOSTNAME": f"autodl-container-{CONTAINER_ID}"}
    warn = ephemeral_storage_warning("/srv/ckpt/*.pt", hostname="ci-runner", env=inside, partitions=[])
    assert warn and "/root/autodl-tmp" in warn
    assert ephemeral_storage_warning("/root/autodl-tmp/ckpt/*.pt", hostname="ci-runner", env=inside,
                                     partitions=[]) is None
    assert ephemeral_storage_warning("/srv/ckpt/*.pt", hostname="ci-runner", env={}, partitions=[]) is None
    outside = {"AUTODL_CONTAINER_HOSTNAME": "ci-laptop"}  # the override names no container
    assert ephemeral_storage_warning("/srv/ckpt/*.pt", hostname="ci-runner", env=outside, partitions=[]) is None
