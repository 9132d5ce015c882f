"""Adapters describe themselves (issue 10, part 5): capabilities with reasons, credential
variables, storage paths and named accounts come from the adapter, never from the core.

* an adapter added from outside the package (an entry point of a distribution on sys.path)
  gets its credential variable, storage paths and capabilities honoured by an unchanged core;
* no provider name appears in costctl/ code outside a short, justified allow-list;
* two named Vast accounts (different keys, real HTTP to the local fake) are both listed by
  ``costctl instances``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest

from costctl.checkpoint import ephemeral_storage_warning
from costctl.config import Settings
from costctl.errors import ConfigError
from costctl.watch.instance import resolve_instance
from costctl_providers import errors as public_errors
from costctl_providers import _http
from costctl_providers.base import Capabilities, Capability, Provider
from costctl_providers.capabilities import Storage, StoragePath, no
from costctl_providers.credentials import load_credential
from costctl_providers.errors import CapabilityError
from costctl_providers.registry import (available_providers, capabilities_of, credential_env, get_provider,
                                        provider_class, storage_layouts)
from costctl_providers.sim import SimProvider
from costctl_providers.vastai import VastAIProvider
from tests.fakes.vastai import API_KEY, FakeVast

from test_cli_instances import env, run  # noqa: F401 - the same isolated CLI fixture

ROOT = Path(__file__).resolve().parents[1]
Part = namedtuple("Part", "device mountpoint fstype opts")

# ----------------------------------------------------------------------------- an outside adapter

LAB_MODULE = '''
"""A provider adapter that lives outside costctl_providers: "lab", an in-house GPU cluster."""
from datetime import datetime, timezone
from decimal import Decimal

from costctl_providers.base import BillingMode, Capabilities, Instance, Provider, Status
from costctl_providers.capabilities import Storage, StoragePath, no, yes
from costctl_providers.credentials import load_credential


class LabProvider(Provider):
    name = "lab"
    credential_env = ("LAB_CLOUD_TOKEN",)
    capabilities = Capabilities(
        stop=no("lab machines are shared and never powered off"), start=yes(),
        release=no("lab machines are not rented"),
    )
    storage = Storage(
        paths=(StoragePath("/lab/persist", survives=True, note="the cluster's NFS home"),
               StoragePath("/lab/scratch", survives=False, note="node-local scratch, wiped at release")),
        env_markers=("LAB_NODE",),
        others_survive=False,
        others_note="only /lab/persist outlives a job on the lab cluster",
    )

    def __init__(self, config, *, data_dir, clock=None):
        self.config, self.data_dir = dict(config), data_dir

    def _token(self):
        return load_credential(self.name, self.config, data_dir=self.data_dir).secret

    def _inst(self, iid):
        return Instance(provider="lab", id=iid, gpu="A100 80GB", gpu_raw="a100", gpu_count=1,
                        billing=BillingMode.PREPAID, price_per_hour=Decimal("1.10"), currency="EUR",
                        status=Status.RUNNING, started_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                        raw={"token_len": len(self._token())})

    def list_instances(self):
        return [self._inst("node-7")]

    def get_instance(self, instance_id):
        return self._inst(instance_id)

    def start_instance(self, instance_id):
        return self._inst(instance_id)

    def stop_instance(self, instance_id, *, wait=True):
        raise AssertionError("costctl must not call stop: capabilities.stop is absent")
'''


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """The "lab" adapter installed the way a third-party distribution would: a module and a
    dist-info with a ``costctl.providers`` entry point, on sys.path. Nothing is registered."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "lab_costctl.py").write_text(textwrap.dedent(LAB_MODULE))
    dist = site / "lab_costctl-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-costctl\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[costctl.providers]\nlab = lab_costctl:LabProvider\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("LAB_CLOUD_TOKEN", raising=False)
    yield site
    sys.modules.pop("lab_costctl", None)


def test_outside_adapter_is_found_through_its_entry_point(lab, tmp_path):
    assert "lab" in available_providers()
    assert provider_class("lab").__module__ == "lab_costctl"
    assert credential_env("lab") == ("LAB_CLOUD_TOKEN",)
    caps = capabilities_of("lab")
    assert not caps.stop and caps.stop.reason == "lab machines are shared and never powered off"
    assert caps.start and not caps.move_job and not caps.create


def test_outside_adapter_credential_comes_from_its_own_variable(lab, tmp_path):
    cred = load_credential("lab", {}, data_dir=tmp_path, env={"LAB_CLOUD_TOKEN": "lab-secret"})
    assert cred is not None and cred.name == "LAB_CLOUD_TOKEN" and cred.secret == "lab-secret"
    with pytest.raises(ConfigError, match=r"no credential for lab: set LAB_CLOUD_TOKEN or add \[lab\] api_key"):
        load_credential("lab", {}, data_dir=tmp_path, env={"VAST_API_KEY": "x"})


def test_outside_adapter_through_the_cli(lab, env, capsys, monkeypatch):
    (env / "costctl.toml").write_text('[instance]\nprovider = "lab"\n')
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 1 and "LAB_CLOUD_TOKEN" in err and "Traceback" not in err
    monkeypatch.setenv("LAB_CLOUD_TOKEN", "lab-secret")
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 0, err
    [row] = json.loads(out)
    assert (row["provider"], row["account"], row["id"], row["currency"]) == ("lab", None, "node-7", "EUR")
    # its absent stop capability is honoured, with the adapter's reason
    code, out, err = run(capsys, "stop", "node-7")
    assert code != 0 and err.strip() == ("costctl: provider lab cannot stop instances: "
                                         "lab machines are shared and never powered off")


def test_outside_adapter_storage_drives_the_checkpoint_warning(lab):
    parts = [Part("/dev/sda1", "/", "ext4", "")]
    on_lab = {"LAB_NODE": "node-7"}
    assert "lab" in dict(storage_layouts())
    warn = ephemeral_storage_warning("/home/me/ckpt/*.pt", hostname="n7", env=on_lab, partitions=parts)
    assert warn and "/lab/persist" in warn and "only /lab/persist outlives a job" in warn
    warn = ephemeral_storage_warning("/lab/scratch/ckpt/*.pt", hostname="n7", env=on_lab, partitions=parts)
    assert warn and "node-local scratch" in warn
    assert ephemeral_storage_warning("/lab/persist/ckpt/*.pt", hostname="n7", env=on_lab, partitions=parts) is None
    # off the lab cluster the lab's rules do not apply
    assert ephemeral_storage_warning("/home/me/ckpt/*.pt", hostname="n7", env={}, partitions=parts) is None


def test_a_provider_that_cannot_stop_is_refused_unless_advise_only(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_CLOUD_TOKEN", "lab-secret")
    prov = get_provider("lab", {}, data_dir=tmp_path)
    settings = Settings(instance={"provider": "lab", "id": "node-7"}, policies={"idle": {"action": "stop"}})
    said: list[str] = []
    # the preflight asks the adapter's declarations: no stop through the API, no self-stop
    with pytest.raises(ConfigError) as info:
        resolve_instance(settings, prov, say=said.append)
    assert info.value.exit_code == 2 and said == []
    assert info.value.message == (
        "refusing to watch lab instance node-7: costctl could not stop it. API: lab cannot stop instances "
        "through its API (lab machines are shared and never powered off); self-stop: the instance is "
        "stopped through the provider's API only. Fix one of them, or pass --advise-only for a watch "
        "that stops nothing")
    resolved = resolve_instance(settings, prov, say=said.append, advise_only=True)
    assert resolved.route.kind == "none" and not resolved.route.stops and said == []
    assert "the API could not: lab cannot stop instances" in resolved.route.detail
    # a provider that can stop: the API route, the settings unchanged
    sim = SimProvider({}, data_dir=tmp_path / "sim")
    ok = resolve_instance(Settings(policies={"idle": {"action": "stop"}}), sim, say=said.append)
    assert ok.route.kind == "api" and str(ok.route) == "stop route: API (instance read)"
    assert ok.settings.policies.idle.action == "stop"


# ----------------------------------------------------------------------------- capabilities


def test_every_shipped_adapter_declares_its_capabilities_with_reasons():
    for name in ("sim", "autodl", "vastai", "runpod"):
        cls = provider_class(name)
        caps = cls.capabilities
        for cap_name, cap in caps.as_dict().items():
            assert isinstance(cap, Capability)
            assert cap.supported or cap.reason, f"{name}.{cap_name} absent without a reason"
        assert caps.offers is caps.list_offers
    assert provider_class("sim").capabilities.move_job
    assert not any(provider_class(n).capabilities.move_job for n in ("autodl", "vastai", "runpod"))
    assert provider_class("autodl").capabilities.self_stop
    assert not provider_class("autodl").capabilities.list_offers
    assert not provider_class("runpod").capabilities.create
    assert {n: credential_env(n) for n in ("autodl", "vastai", "runpod", "sim")} == {
        "autodl": ("AUTODL_TOKEN",), "vastai": ("VAST_API_KEY",), "runpod": ("RUNPOD_API_KEY",), "sim": ()}


def test_capabilities_accept_bools_capabilities_and_reasons():
    caps = Capabilities(stop=False, create="no API for it", offers=True)
    assert not caps.stop and caps.stop.reason == "stop is not supported"
    assert caps.create == Capability(False, "no API for it") and caps.list_offers
    assert caps.get("offers") is caps.list_offers
    assert caps.absent()["create"] == "no API for it"
    with pytest.raises(TypeError, match="unknown capability 'teleport'"):
        Capabilities(teleport=True)


def test_create_instance_on_the_base_class_says_why_not(tmp_path):
    class Bare(Provider):
        name = "bare"
        capabilities = Capabilities(create=no("bare metal is ordered by e-mail"))

        def list_instances(self):
            return []

        get_instance = start_instance = stop_instance = lambda self, *a, **k: None  # noqa: E731

    with pytest.raises(CapabilityError, match="bare: creating instances is not supported: bare metal") as info:
        Bare().create_instance("A100")
    assert info.value.capability == "create"
    with pytest.raises(CapabilityError, match="listing offers is not supported"):
        Bare().list_offers()


def test_public_errors_module_and_old_imports_are_the_same_classes():
    for cls in ("AuthError", "NotFoundError", "RateLimitedError", "ProviderUnavailableError",
                "ProviderResponseError", "StatusWaitError"):
        assert getattr(_http, cls) is getattr(public_errors, cls)


def test_shipped_storage_declarations_move_out_of_the_core():
    layouts = dict(storage_layouts())
    autodl = layouts["autodl"]
    assert autodl.find("/root/autodl-tmp/ckpt").survives
    fs = autodl.find("/root/autodl-fs/x")
    assert fs is not None and fs.survives and fs.network
    assert layouts["runpod"].find("/workspace/ckpt").survives
    assert "sim" not in layouts and "vastai" not in layouts
    assert isinstance(autodl, Storage) and isinstance(fs, StoragePath)


# ----------------------------------------------------------------------------- no names in the core

PROVIDER_NAMES = ("sim", "autodl", "vastai", "runpod")
_WORD = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(PROVIDER_NAMES) + r")(?![A-Za-z0-9])", re.IGNORECASE)

#: (file, the text that may name a provider, why). Docstrings and comments are never checked.
ALLOWED = {
    ("costctl/config.py", "sim"): "[instance] provider defaults to the simulated provider, so costctl "
                                  "runs with no account (the registry's default)",
    ("costctl/cli/analyze.py", "Provider for a catalog price, e.g. runpod (with --gpu)."):
        "--help text: an example value of a price-catalog provider",
    ("costctl/cli/gpus.py", "Only prices from this provider (runpod, vastai, autodl, aws...)."):
        "--help text: example values of price-catalog providers",
    # `costctl sim ...`: the simulated provider's own rehearsal commands (`costctl sim preempt`
    # makes it issue a preemption notice); the command word is the provider's name by design.
    ("costctl/cli/main.py", "sim"): "the `sim` command word and its module",
    ("costctl/cli/sim.py", "sim"): "the `sim` command group and the provider it opens",
    ("costctl/cli/sim.py", "sim_app"): "the `sim` command group's typer app",
    ("costctl/cli/sim.py", "The simulated provider: rehearse what a real cloud does (sim preempt: a spot "
                           "preemption notice)."): "--help text of the `sim` command group",
}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of string statements (module/class/function docstrings and attribute docstrings)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def provider_names_in_code(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, text) for each string literal or identifier in ``root/costctl`` naming a
    provider as a word (``"sim"``, ``is_autodl``, ``"/root/autodl-tmp"``...)."""
    hits = []
    for path in sorted((root / "costctl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
            elif isinstance(node, ast.Name):
                text = node.id
            elif isinstance(node, ast.Attribute):
                text = node.attr
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                text = node.name
            elif isinstance(node, ast.arg):
                text = node.arg
            elif isinstance(node, ast.alias):
                text = node.asname or node.name
            if text and _WORD.search(text.replace("_", " ")):
                hits.append((path.relative_to(root).as_posix(), getattr(node, "lineno", 0), text))
    return hits


def test_no_provider_name_in_the_core_outside_the_allow_list():
    found = provider_names_in_code(ROOT)
    unexpected = [h for h in found if (h[0], h[2]) not in ALLOWED]
    assert unexpected == [], "provider names in costctl/ (ask the adapter instead): " + "; ".join(
        f"{f}:{line} {text!r}" for f, line, text in unexpected)
    assert {(f, t) for f, _, t in found} == set(ALLOWED), "an allow-list entry is no longer needed: remove it"


def test_the_name_scan_catches_a_provider_test(tmp_path):
    (tmp_path / "costctl").mkdir()
    (tmp_path / "costctl" / "x.py").write_text('"""Docstrings may say sim."""\nif name == "sim":\n    pass\n'
                                                "def is_autodl(host):\n    return '/root/autodl-tmp'\n")
    assert sorted((line, text) for _, line, text in provider_names_in_code(tmp_path)) == [
        (2, "sim"), (4, "is_autodl"), (5, "/root/autodl-tmp")]


# ----------------------------------------------------------------------------- named accounts

TEAM_KEY = "vast-team-key-fedcba9876543210"


@pytest.fixture
def two_accounts():
    with FakeVast(api_keys=(API_KEY, TEAM_KEY)) as fake:
        fake.add(312, dph_total=0.5)
        fake.add(313, dph_total=0.8, owner=API_KEY)
        fake.add(900, dph_total=1.25, owner=TEAM_KEY)
        yield fake


def _vast_toml(url: str) -> str:
    return textwrap.dedent(f'''
        [providers.vastai]
        base_url = "{url}"
        timeout = 2
        retries = 0

        [providers.vastai.accounts.research]
        credential_env = "VAST_RESEARCH_KEY"

        [providers.vastai.accounts.team]
        credential_env = ["VAST_TEAM_KEY"]
        timeout = 3
    ''')


def test_two_named_accounts_are_listed_by_instances(two_accounts, env, capsys, monkeypatch):
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("VAST_RESEARCH_KEY", API_KEY)
    monkeypatch.setenv("VAST_TEAM_KEY", TEAM_KEY)
    (env / "costctl.toml").write_text(_vast_toml(two_accounts.url))
    code, out, err = run(capsys, "instances", "--provider", "vastai", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    # the default account has no credential, so only the two named ones are asked
    assert sorted((r["account"], r["id"]) for r in rows) == [
        ("research", "312"), ("research", "313"), ("team", "900")]
    code, out, err = run(capsys, "instances", "--provider", "vastai")
    assert code == 0, err
    assert "ACCOUNT" in out and "team" in out and "research" in out
    code, out, err = run(capsys, "instances", "--account", "team", "--provider", "vastai", "--format", "json")
    assert code == 0 and [(r["account"], r["id"]) for r in json.loads(out)] == [("team", "900")]
    # each account's table overlays the provider's: the team account has its own timeout
    from costctl.cloud import open_provider

    settings = Settings(data_dir=str(env), providers={"vastai": {
        "base_url": two_accounts.url, "timeout": 2,
        "accounts": {"team": {"credential_env": "VAST_TEAM_KEY", "timeout": 3}}}})
    team = open_provider(settings, "vastai", account="team")
    assert isinstance(team, VastAIProvider) and team.config.timeout == 3 and team.account == "team"
    assert open_provider(settings, "vastai").config.timeout == 2


def test_default_and_named_accounts_side_by_side(two_accounts, env, capsys, monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", API_KEY)
    monkeypatch.delenv("VAST_RESEARCH_KEY", raising=False)
    monkeypatch.setenv("VAST_TEAM_KEY", TEAM_KEY)
    toml = _vast_toml(two_accounts.url).replace('[providers.vastai.accounts.research]\ncredential_env = "VAST_RESEARCH_KEY"\n', "")
    (env / "costctl.toml").write_text('[instance]\nprovider = "vastai"\naccount = "team"\nid = "900"\n' + toml)
    code, out, err = run(capsys, "instances", "--format", "json")
    assert code == 0, err
    assert sorted((r["account"] or "", r["id"]) for r in json.loads(out)) == [("", "312"), ("", "313"), ("team", "900")]
    # [instance] account picks the account a command acts for; --account overrides it
    code, out, err = run(capsys, "stop", "900", "--dry-run")
    assert code == 0 and "900 on vastai account team" in out, err
    code, out, err = run(capsys, "stop", "900", "--dry-run", "--account", "nobody")
    assert code != 0 and "no account 'nobody'" in err


def test_named_account_never_uses_the_default_credential(two_accounts, tmp_path, monkeypatch):
    from costctl.cloud import open_provider

    monkeypatch.setenv("VAST_API_KEY", API_KEY)
    monkeypatch.delenv("VAST_TEAM_KEY", raising=False)
    data = tmp_path / "data"
    settings = Settings(data_dir=str(data), providers={"vastai": {
        "base_url": two_accounts.url, "accounts": {"team": {"credential_env": "VAST_TEAM_KEY"}}}})
    prov = open_provider(settings, "vastai", account="team")
    assert prov.account == "team" and not prov.has_credential()
    with pytest.raises(ConfigError, match=r"no credential for vastai account 'team': set VAST_TEAM_KEY or add "
                                          r"\[vastai.accounts.team\] api_key"):
        prov.list_instances()
    # the credentials file's account section works too
    data.mkdir(exist_ok=True)
    cred = data / "credentials.toml"
    cred.write_text(f'[vastai.accounts.team]\napi_key = "{TEAM_KEY}"\n')
    cred.chmod(0o600)
    prov = open_provider(settings, "vastai", account="team")
    assert [i.id for i in prov.list_instances()] == ["900"]


def test_accounts_on_a_provider_without_them_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="provider 'sim' has no named accounts"):
        from costctl.cloud import open_provider

        open_provider(Settings(data_dir=str(tmp_path), providers={"sim": {"accounts": {"x": {}}}}), "sim", account="x")
