"""``costctl init``: write a commented example ``costctl.toml``.

The shipped example (``costctl/data/costctl.example.toml``) is written as it is, except for the
part between :data:`POLICIES_BEGIN` and :data:`POLICIES_END`: that is generated from the
registered policies' config models (:func:`policies_toml`), so every policy, a third-party one
included, gets its table with each key, its default, and its description and bounds as a comment.

``costctl init --provider NAME`` writes the same file made ready for that provider
(:func:`provider_config`): the adapter's :class:`~costctl_providers.preset.ConfigPreset` sets
its keys (currency, timezone, the checkpoint path that survives a stop, the self-stop command,
...) each with the comment that says why; ``[instance] gpu``, ``gpu_count`` and the
``price_per_hour`` fallback come from ``--gpu``/``--gpu-count`` (or the preset's card) and
costctl's price table; the provider's table and its credential hint close the file.
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
import typing
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError
from ..paths import CONFIG_FILE_NAME
from .common import err_console

if TYPE_CHECKING:  # pydantic and the policies load when a config is generated, not for --help
    from pydantic import BaseModel

    from costctl_providers.preset import ConfigPreset, PresetKey

    from ..catalog.prices import PriceEntry
    from ..policies import PolicySpec

#: Markers around the generated ``[policies.*]`` tables in the example config.
POLICIES_BEGIN = "# ---- [policies.*]: generated from each policy's config model (costctl init) ----"
POLICIES_END = "# ---- end of [policies.*] ----"

#: Column at which a key's comment starts (when the key = value fits before it).
COMMENT_COLUMN = 28
#: A comment longer than fits after its key on a line this wide goes on lines of its own above it.
LINE_WIDTH = 100
#: The line the provider part of the example config starts with (its tables, commented out).
PROVIDERS_PART = "# One table per provider:"

#: Sentences ``init --provider`` writes (named placeholders, for translation).
HEADER_WRITTEN_BY = "# costctl.toml — configuration for costctl (written by `costctl init --provider {provider}`)."
PROVIDER_WHY = "{title}; a comment says why each key below is set as it is"
GPU_WHY = ("The card this instance rents ({count} per instance below); `costctl init --provider {provider} --gpu NAME "
           "--gpu-count N` writes another, and `costctl gpus --provider {provider}` lists the names.")
PRICE_WHY = ("A fallback, per instance-hour: {count} x {gpu} at {price} {currency} per card-hour, {provider}'s "
             "price in costctl's table, seen {seen}{estimated}. {note}")
PRICE_ESTIMATED = " (an estimate)"
NO_PRICE_WHY = ("Per instance-hour, in [instance] currency: costctl's table has no on-demand {currency} price for "
                "{gpu} at {provider}. {note}")
PROVIDER_TABLE_HEAD = ("[providers.{provider}]: the {title} adapter's own keys, all optional (their defaults shown). "
                       "Its credential never goes in this file: {env}, or {keys} under [{provider}] in "
                       "credentials.toml in costctl's data dir (chmod 600).")


def _toml_value(value: Any) -> str:
    """A JSON-mode default as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))


def _choices(annotation: Any) -> list[str]:
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is typing.Literal:
            return [str(a) for a in typing.get_args(arg)]
    return []


def _line(text: str, comment: str) -> str:
    if not comment:
        return text
    pad = max(COMMENT_COLUMN - len(text), 2)
    return f"{text}{' ' * pad}# {comment}"


def _heading(spec: PolicySpec) -> str:
    text = re.sub(r"^``\[policies\.[\w.]+\]``:\s*", "", spec.description)
    return text.replace("``", "`")


def policy_section_toml(spec: PolicySpec) -> str:
    """The ``[policies.<name>]`` table of one policy: every key with its default (a key without
    one, commented out, showing the field's first example if it has one), its description, its
    choices and its range (:func:`costctl.config_types.value_range`) as a comment."""
    from ..config_types import value_range

    model: type[BaseModel] = spec.config
    defaults = model().model_dump(mode="json")
    lines = [_line(f"[policies.{spec.name}]", _heading(spec))]
    for key, field in model.model_fields.items():
        comment = field.description or ""
        choices = _choices(field.annotation)
        if choices and "|" not in comment:
            comment = (comment + ": " if comment else "") + " | ".join(choices)
        bounds = value_range(field)
        if bounds:
            comment += f" ({bounds})" if comment else bounds
        value = defaults.get(key)
        if value is None:
            example = _toml_value(field.examples[0]) if field.examples else "..."
            lines.append(_line(f"# {key} = {example}", comment + ("; default: unset" if comment else "default: unset")))
        else:
            lines.append(_line(f"{key} = {_toml_value(value)}", comment))
    return "\n".join(lines) + "\n"


def policies_toml(specs: list[PolicySpec] | None = None) -> str:
    """Every registered policy's table (:func:`policy_section_toml`), in evaluation order,
    separated by blank lines."""
    from ..policies import registrations

    return "\n".join(policy_section_toml(s) for s in (registrations() if specs is None else specs))


def _template() -> str:
    return resources.files("costctl").joinpath("data/costctl.example.toml").read_text(encoding="utf-8")


def splice_policies(template: str, generated: str) -> str:
    """``template`` with the text between the policy markers replaced by ``generated``.

    Raises:
        ValueError: the template lacks a marker.
    """
    start = template.index(POLICIES_BEGIN) + len(POLICIES_BEGIN) + 1
    end = template.index(POLICIES_END)
    return template[:start] + generated + template[end:]


def example_config() -> str:
    """The commented example config: the shipped file, its ``[policies.*]`` part generated from
    the registered policies (built-in and ``costctl.policies`` plugins).

    Raises:
        ConfigError: a policy plugin cannot be loaded.
    """
    from ..policies import discover_policies

    discover_policies()
    return splice_policies(_template(), policies_toml())


def _comment_lines(text: str, indent: str = "") -> list[str]:
    """``text`` as ``# `` comment lines of at most :data:`LINE_WIDTH` columns."""
    return [f"{indent}# {line}" for line in textwrap.wrap(text, width=LINE_WIDTH - 2 - len(indent))]


def key_lines(key: str, value: Any, why: str, *, commented: bool = False) -> list[str]:
    """``key = value  # why`` (``# key = value`` when ``commented``): on one line when it fits in
    :data:`LINE_WIDTH` columns, else the reason on comment lines above the key."""
    text = f"{'# ' if commented else ''}{key} = {_toml_value(value)}"
    one = _line(text, why)
    if len(one) <= LINE_WIDTH or not why:
        return [one]
    return [*_comment_lines(why), text]


def set_key(template: str, section: str, key: str, lines: list[str]) -> str:
    """``template`` with the line of ``key`` in table ``[section]`` (set, or commented out as
    ``# key = ...``) and the indented comment lines continuing it replaced by ``lines``.

    Raises:
        ValueError: the template has no table ``[section]`` or no such key in it (the example
            config must show every key a preset writes).
    """
    rows = template.split("\n")
    header = re.compile(rf"^\[{re.escape(section)}\](\s|$)")
    start = next((i for i, row in enumerate(rows) if header.match(row)), None)
    if start is None:
        raise ValueError(f"the example config has no table [{section}]")
    wanted = re.compile(rf"^(# )?{re.escape(key)} = ")
    for i in range(start + 1, len(rows)):
        if rows[i].startswith("["):
            break
        if wanted.match(rows[i]):
            end = i + 1
            while end < len(rows) and re.match(r"^\s+#", rows[end]):
                end += 1
            return "\n".join(rows[:i] + lines + rows[end:])
    raise ValueError(f"the example config shows no key {key} in [{section}]")


def _preset_key_lines(k: PresetKey) -> list[str]:
    if k.value is None:
        return key_lines(k.key, k.example if k.example is not None else "...", k.why, commented=True)
    return key_lines(k.key, k.value, k.why)


def _provider_table(name: str, preset: ConfigPreset) -> str:
    """The closing part of a provider's config: what its credential is and where it goes, and its
    ``[providers.NAME]`` table commented out (every key of its config model with its default)."""
    from costctl_providers.registry import credential_env, provider_class

    cls = provider_class(name)
    env = credential_env(name)
    keys = getattr(cls, "credential_keys", ("api_key", "token"))
    head = PROVIDER_TABLE_HEAD.format(
        provider=name, title=preset.display_name,
        env=" or ".join(f"set {v}" for v in env) if env else "this adapter needs none",
        keys=" or ".join(f'{k} = "..."' for k in keys))
    lines = _comment_lines(head)
    if preset.credential_hint:
        lines += _comment_lines(preset.credential_hint)
    lines.append(f"# [providers.{name}]")
    model = getattr(cls, "config_model", None)
    for field_name, field in (model.model_fields.items() if model is not None else ()):
        default = field.get_default(call_default_factory=True)
        lines.append(f"# {field_name} = {_toml_value(default if default is not None else '...')}")
    return "\n".join(lines) + "\n"


def _table_price(provider: str, gpu: str, currency: str) -> PriceEntry | None:
    """The cheapest on-demand row of costctl's shipped price table for ``gpu`` at ``provider``
    in ``currency`` (None when it has none)."""
    from ..catalog.prices import load_price_table

    rows = [e for e in load_price_table(None, include_imported=False).lookup(gpu, provider=provider,
                                                                              billing="on-demand")
            if e.currency == currency]
    return min(rows, key=lambda e: e.price_per_gpu_hour) if rows else None


def provider_config(name: str, *, gpu: str | None = None, gpu_count: int = 1) -> str:
    """The example config made ready for provider ``name`` (see the module docstring).

    Args:
        name: a provider adapter's name (``costctl_providers.registry.available_providers``).
        gpu: the card the instance rents (any spelling the catalog or the price table knows);
            default: the preset's ``default_gpu`` (None: left to the provider's API).
        gpu_count: GPUs per instance (``price_per_hour`` is per instance-hour).

    Raises:
        ConfigError: unknown provider (the message lists the available ones).
        UsageError: a ``gpu`` neither the catalog nor the provider's prices know.
    """
    from costctl_providers.registry import config_preset_of, credential_env

    from ..catalog.gpus import load_catalog, normalize_gpu_name
    from ..config import InstanceConfig

    preset = config_preset_of(name)
    text = example_config()
    lines = text.split("\n")
    lines[0] = HEADER_WRITTEN_BY.format(provider=name)
    blank = lines.index("")
    summary = [row for sentence in preset.summary for row in _comment_lines(sentence)]
    text = "\n".join(lines[:blank] + (["#", *summary] if summary else []) + lines[blank:])
    text = set_key(text, "instance", "provider",
                   key_lines("provider", name, PROVIDER_WHY.format(title=preset.display_name) if preset.keys else preset.display_name))
    keys = {(k.section, k.key): k for k in preset.keys}
    for k in preset.keys:
        text = set_key(text, k.section, k.key, _preset_key_lines(k))
    card = gpu or preset.default_gpu
    if card is not None:
        resolved, known = normalize_gpu_name(card)
        preset_currency = keys.get(("instance", "currency"))
        currency = str(preset_currency.value if preset_currency else InstanceConfig.model_fields["currency"].default)
        entry = _table_price(name, resolved, currency)
        if not known and entry is None:
            like = load_catalog().names_like(card)
            raise UsageError(f"--gpu {card!r} is neither in costctl's GPU catalog nor in {name}'s prices"
                             + (f"; did you mean {', '.join(like)}?" if like else "; see `costctl gpus`"))
        text = set_key(text, "instance", "gpu", key_lines("gpu", resolved, GPU_WHY.format(count=gpu_count, provider=name)))
        text = set_key(text, "instance", "gpu_count", key_lines("gpu_count", gpu_count, ""))
        if entry is not None:
            price = entry.price_per_gpu_hour * gpu_count
            why = PRICE_WHY.format(count=gpu_count, gpu=resolved, price=entry.price_per_gpu_hour, currency=currency,
                                   provider=name, seen=entry.seen.isoformat(),
                                   estimated=PRICE_ESTIMATED if entry.estimated else "", note=preset.price_note)
            text = set_key(text, "instance", "price_per_hour", key_lines("price_per_hour", str(price), why.strip()))
        else:
            why = NO_PRICE_WHY.format(currency=currency, gpu=resolved, provider=name, note=preset.price_note)
            text = set_key(text, "instance", "price_per_hour",
                           key_lines("price_per_hour", "...", why.strip(), commented=True))
    elif preset.price_note:
        text = set_key(text, "instance", "price_per_hour",
                       key_lines("price_per_hour", "...", preset.price_note, commented=True))
    if credential_env(name) and PROVIDERS_PART in text:  # an account's adapter: its table and credential
        text = text[:text.index(PROVIDERS_PART)] + _provider_table(name, preset)
    tomllib.loads(text)  # never write a file that is not TOML
    return text


def init(
    path: Annotated[Path, typer.Argument(help="Where to write it.")] = Path(CONFIG_FILE_NAME),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    provider: Annotated[str | None, typer.Option("--provider", "-p", help="Write it ready for this provider's machines (an installed adapter's name): its currency, timezone, the checkpoint path that survives a stop, its self-stop, its credential; each choice explained in a comment.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="With --provider: the card the instance rents; its price in costctl's table becomes the price_per_hour fallback.")] = None,
    gpu_count: Annotated[int, typer.Option("--gpu-count", help="With --provider: GPUs per instance.", min=1, max=64)] = 1,
) -> None:
    """Write a commented example config (every key with its default), or one ready for a
    provider (--provider)."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a file path, e.g. {path / CONFIG_FILE_NAME}")
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; use --force to overwrite it")
    if provider is None and (gpu is not None or gpu_count != 1):
        raise UsageError("--gpu and --gpu-count describe the instance of a --provider; give --provider too")
    text = example_config() if provider is None else provider_config(provider.strip().lower(), gpu=gpu,
                                                                          gpu_count=gpu_count)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    err_console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add ``init`` to ``app``."""
    app.command("init")(init)
