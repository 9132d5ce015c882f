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

Language: the comments are written in the language shown (:func:`costctl.i18n.choose_language`:
``COSTCTL_UI__LANGUAGE``, else ``[ui] language`` of the config file costctl would read, else
``LANGUAGE``/``LC_ALL``/``LC_MESSAGES``/``LANG``); keys and values are the same in every language.
The shipped example has one file per language (:data:`TEMPLATES`: the English one and its
Simplified Chinese translation, kept key for key and value for value alike by
``tests/test_cli_init_i18n.py``); every generated sentence (the policies' descriptions and
ranges, the presets' reasons, the price and credential notes) is an English message id marked
with :func:`~costctl.i18n.N_` where it is declared and translated with :func:`~costctl.i18n._`
as it is written. Comments are wrapped by display width (:func:`rich.cells.cell_len`: a CJK
character takes two columns) so that no line passes :data:`LINE_WIDTH` columns.
"""

from __future__ import annotations

import json
import re
import tomllib
import typing
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError
from ..validation import require_regular_file
from ..i18n import N_, _, format_amount, language, set_language
from ..paths import CONFIG_FILE_NAME
from .common import err_console

if TYPE_CHECKING:  # pydantic and the policies load when a config is generated, not for --help
    from pydantic import BaseModel

    from costctl_providers.preset import ConfigPreset, PresetKey

    from ..catalog.prices import PriceEntry
    from ..policies import PolicySpec

#: Markers around the generated ``[policies.*]`` tables in the example config (English; each
#: template holds them in its own language: :func:`markers`).
POLICIES_BEGIN = N_("# ---- [policies.*]: generated from each policy's config model (costctl init) ----")
POLICIES_END = N_("# ---- end of [policies.*] ----")

#: The shipped example config of each language (``costctl/`` relative paths); a language
#: without one gets the English file.
TEMPLATES = {"en": "data/costctl.example.toml", "zh_CN": "data/costctl.example.zh_CN.toml"}

#: Column at which a key's comment starts (when the key = value fits before it), and where its
#: continuation lines start.
COMMENT_COLUMN = 28
#: No comment line is wider than this many columns (display width: a CJK character is 2).
LINE_WIDTH = 100
#: A key's comment gets at least this many columns on the key's line; with less room (a long
#: commented-out example value) it starts on the next line.
MIN_COMMENT_ROOM = 20

#: Sentences ``init --provider`` writes (named placeholders; translated where written).
HEADER_WRITTEN_BY = N_("# costctl.toml — configuration for costctl (written by `costctl init --provider {provider}`).")
PROVIDER_WHY = N_("{title}; a comment says why each key below is set as it is")
GPU_WHY = N_("The card this instance rents ({count} per instance below); `costctl init --provider {provider} "
             "--gpu NAME --gpu-count N` writes another, and `costctl gpus --provider {provider}` lists the names.")
PRICE_WHY = N_("A fallback, per instance-hour: {count} x {gpu} at {price} per card-hour, {provider}'s "
               "price in costctl's table, seen {seen}.")
PRICE_WHY_ESTIMATED = N_("A fallback, per instance-hour: {count} x {gpu} at {price} per card-hour, "
                         "{provider}'s price in costctl's table, seen {seen} (an estimate).")
GPU_COUNT_WHY = N_("GPUs on the instance")
NO_PRICE_WHY = N_("Per instance-hour, in [instance] currency: costctl's table has no on-demand {currency} price "
                  "for {gpu} at {provider}.")
PROVIDER_TABLE_HEAD = N_("[providers.{provider}]: the {title} adapter's own keys, all optional (their defaults "
                         "shown). Its credential never goes in this file: {env}, or {keys} under [{provider}] in "
                         "credentials.toml in costctl's data dir (chmod 600).")
#: How a policy key's comment is put together from its description, choices and range.
WITH_CHOICES = N_("{description}: {choices}")
WITH_RANGE = N_("{description} ({range})")
WITH_UNSET = N_("{description}; default: unset")
UNSET = N_("default: unset")
#: Two whole sentences of one comment, in the language's spacing.
TWO_SENTENCES = N_("{first} {second}")
#: Where a provider's credential comes from, in :data:`PROVIDER_TABLE_HEAD`'s ``{env}``.
SET_VARIABLE = N_("set {variables}")
NO_CREDENTIAL = N_("this adapter needs none")


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


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal (rich's cell widths: 2 for a CJK character)."""
    from rich.cells import cell_len

    return cell_len(text)


#: Characters of the CJK scripts and their full-width punctuation: a line may break between any
#: two of them (Chinese has no spaces), except before closing punctuation or after an opening one.
_CJK = "\u2018-\u201f\u2026\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"
_OPENING = "（「『《“‘"
_CLOSING = "，。；：、）」』》！？”’…"
#: The most characters of a parenthesis kept whole on one line (a range such as
#: ``（1 到 1000000000000）`` or ``(1s to 8760h)``); a longer one is broken like any text.
_KEPT_PARENTHESIS = 24
#: The units a line is filled with: a short parenthesis whole (with the punctuation after it);
#: an opening mark, one CJK character and the closing marks after it; or a run of other non-space
#: characters with the closing marks after it; each with its spaces.
_UNIT = re.compile(rf"[（(][^（）()\n]{{1,{_KEPT_PARENTHESIS}}}[）)][^\s{_CJK}(]*[{_CLOSING}]*\s*"
                   rf"|[{_OPENING}]*[^\s{_CJK}]+[{_CLOSING}]*\s*|[{_OPENING}]*[{_CJK}][{_CLOSING}]*\s*|\s+")


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns of display width (:func:`rich.cells.cell_len`:
    2 for a CJK character): filled greedily with words, broken at spaces and between two CJK
    characters (never before a closing mark such as ``，`` or after an opening one); a word
    longer than a line is folded (:func:`rich.cells.chop_cells`)."""
    from rich.cells import cell_len, chop_cells

    width = max(width, 2)
    lines: list[str] = []
    line = ""
    for unit in _UNIT.findall(text.strip()):
        if cell_len((line + unit).rstrip()) <= width:
            line += unit
            continue
        if line.strip():
            lines.append(line.rstrip())
        line = ""
        if cell_len(unit.rstrip()) > width:
            word = unit.rstrip()
            *full, last = chop_cells(word, width)
            lines.extend(full)
            unit = last + unit[len(word):]
        line = unit.lstrip()
    if line.strip():
        lines.append(line.rstrip())
    return lines


def _line(text: str, comment: str) -> str:
    if not comment:
        return text
    pad = max(COMMENT_COLUMN - _width(text), 2)
    return f"{text}{' ' * pad}# {comment}"


def _heading(spec: PolicySpec) -> str:
    text = re.sub(r"^``\[policies\.[\w.]+\]``:\s*", "", _(spec.description))
    return text.replace("``", "`")


def policy_section_toml(spec: PolicySpec) -> str:
    """The ``[policies.<name>]`` table of one policy: every key with its default (a key without
    one, commented out, showing the field's first example if it has one), its description, its
    choices and its range (:func:`costctl.config_types.value_range`) as a comment, in the
    language shown."""
    from ..config_types import value_range

    model: type[BaseModel] = spec.config
    defaults = model().model_dump(mode="json")
    lines = key_lines(f"[policies.{spec.name}]", None, _heading(spec), raw=True)
    for key, field in model.model_fields.items():
        comment = _(field.description) if field.description else ""
        choices = _choices(field.annotation)
        if choices and "|" not in comment:
            comment = _(WITH_CHOICES).format(description=comment, choices=" | ".join(choices)) if comment \
                else " | ".join(choices)
        bounds = value_range(field)
        if bounds:
            comment = _(WITH_RANGE).format(description=comment, range=bounds) if comment else bounds
        value = defaults.get(key)
        if value is None:
            example = field.examples[0] if field.examples else "..."
            comment = _(WITH_UNSET).format(description=comment) if comment else _(UNSET)
            lines += key_lines(key, example, comment, commented=True, raw=not field.examples)
        else:
            lines += key_lines(key, value, comment)
    return "\n".join(lines) + "\n"


def policies_toml(specs: list[PolicySpec] | None = None) -> str:
    """Every registered policy's table (:func:`policy_section_toml`), in evaluation order,
    separated by blank lines."""
    from ..policies import registrations

    return "\n".join(policy_section_toml(s) for s in (registrations() if specs is None else specs))


def _template() -> str:
    """The shipped example config in the language shown (:data:`TEMPLATES`)."""
    name = TEMPLATES.get(language(), TEMPLATES["en"])
    return resources.files("costctl").joinpath(name).read_text(encoding="utf-8")


def markers() -> tuple[str, str]:
    """The lines around the generated ``[policies.*]`` part, in the language shown."""
    return _(POLICIES_BEGIN), _(POLICIES_END)


def splice_policies(template: str, generated: str) -> str:
    """``template`` with the text between the policy markers (:func:`markers`, or the English
    ones) replaced by ``generated``.

    Raises:
        ValueError: the template lacks a marker.
    """
    begin, end_marker = markers()
    if begin not in template:
        begin, end_marker = POLICIES_BEGIN, POLICIES_END
    start = template.index(begin) + len(begin) + 1
    end = template.index(end_marker)
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
    return [f"{indent}# {line}" for line in wrap(text, LINE_WIDTH - 2 - _width(indent))]


def key_lines(key: str, value: Any, why: str, *, commented: bool = False, raw: bool = False) -> list[str]:
    """``key = value  # why`` (``# key = value`` when ``commented``; ``key`` alone when ``raw``
    and ``value`` is None, as for a table header; ``value`` as written when ``raw``, else as a
    TOML value), the comment at :data:`COMMENT_COLUMN` and wrapped by display width so that no
    line passes :data:`LINE_WIDTH` columns: its continuation lines are indented to the same
    column (so they stay with the key: :func:`set_key`). A comment with too little room after
    a long key starts on the next line."""
    shown = "" if raw and value is None else (f" = {value}" if raw else f" = {_toml_value(value)}")
    text = f"{'# ' if commented else ''}{key}{shown}"
    if not why:
        return [text]
    start = max(COMMENT_COLUMN, _width(text) + 2)
    indent = " " * COMMENT_COLUMN
    rest_width = LINE_WIDTH - COMMENT_COLUMN - 2
    if LINE_WIDTH - start - 2 < MIN_COMMENT_ROOM:
        return [text, *(f"{indent}# {row}" for row in wrap(why, rest_width))]
    first = wrap(why, LINE_WIDTH - start - 2)
    if len(first) <= 1:
        return [_line(text, why)]
    rest = why[len(first[0]):].strip()  # the first line is the start of ``why``, less spaces
    return [_line(text, first[0]), *(f"{indent}# {row}" for row in wrap(rest, rest_width))]


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
        return key_lines(k.key, k.example if k.example is not None else "...", _(k.why), commented=True,
                         raw=k.example is None)
    return key_lines(k.key, k.value, _(k.why))


def _two_sentences(first: str, second: str) -> str:
    """Two translated sentences as one comment (a space between them in English, none in
    Chinese: the catalogue's ``{first} {second}``); ``first`` alone when ``second`` is empty."""
    return _(TWO_SENTENCES).format(first=first, second=second) if second else first


def _or_list(items: list[str]) -> str:
    """``a``, ``a or b``, ``a, b, or c`` by the language's rules (Babel's CLDR list patterns)."""
    from babel.lists import format_list

    return format_list(items, style="or", locale="zh_CN" if language() == "zh_CN" else "en_US")


def _provider_table(name: str, preset: ConfigPreset) -> str:
    """The closing part of a provider's config: what its credential is and where it goes, and its
    ``[providers.NAME]`` table commented out (every key of its config model with its default)."""
    from costctl_providers.registry import credential_env, provider_class

    cls = provider_class(name)
    env = credential_env(name)
    keys = getattr(cls, "credential_keys", ("api_key", "token"))
    head = _(PROVIDER_TABLE_HEAD).format(
        provider=name, title=_(preset.display_name),
        env=_(SET_VARIABLE).format(variables=_or_list(list(env))) if env else _(NO_CREDENTIAL),
        keys=_or_list([f'{k} = "..."' for k in keys]))
    lines = _comment_lines(head)
    if preset.credential_hint:
        lines += _comment_lines(_(preset.credential_hint))
    lines.append(f"# [providers.{name}]")
    model = getattr(cls, "config_model", None)
    for field_name, field in (model.model_fields.items() if model is not None else ()):
        default = field.get_default(call_default_factory=True)
        lines.append(f"# {field_name} = {_toml_value(default if default is not None else '...')}")
    return "\n".join(lines) + "\n"


def providers_part(text: str) -> int | None:
    """Where the example config's closing part on provider tables starts (the paragraph that
    shows ``# [providers.NAME]`` tables), or None when it has none. Found by its tables, not by
    its words, so that it is found in every language."""
    found = re.search(r"^# \[providers\.", text, re.M)
    if found is None:
        return None
    start = text.rfind("\n\n", 0, found.start())
    return 0 if start < 0 else start + 2


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
    from ..config_types import value_range

    preset = config_preset_of(name)
    title = _(preset.display_name)
    text = example_config()
    lines = text.split("\n")
    lines[0] = _(HEADER_WRITTEN_BY).format(provider=name)
    blank = lines.index("")
    summary = [row for sentence in preset.summary for row in _comment_lines(_(sentence))]
    text = "\n".join(lines[:blank] + (["#", *summary] if summary else []) + lines[blank:])
    text = set_key(text, "instance", "provider",
                   key_lines("provider", name, _(PROVIDER_WHY).format(title=title) if preset.keys else title))
    keys = {(k.section, k.key): k for k in preset.keys}
    for k in preset.keys:
        text = set_key(text, k.section, k.key, _preset_key_lines(k))
    note = _(preset.price_note) if preset.price_note else ""
    card = gpu or preset.default_gpu
    if card is not None:
        resolved, known = normalize_gpu_name(card)
        preset_currency = keys.get(("instance", "currency"))
        currency = str(preset_currency.value if preset_currency else InstanceConfig.model_fields["currency"].default)
        entry = _table_price(name, resolved, currency)
        if not known and entry is None:
            like = load_catalog().names_like(card)
            if like:
                raise UsageError(_("--gpu {gpu!r} is neither in costctl's GPU catalog nor in {provider}'s prices; "
                                   "did you mean {names}?").format(gpu=card, provider=name, names=", ".join(like)))
            raise UsageError(_("--gpu {gpu!r} is neither in costctl's GPU catalog nor in {provider}'s prices; see "
                               "`costctl gpus`").format(gpu=card, provider=name))
        text = set_key(text, "instance", "gpu",
                       key_lines("gpu", resolved, _(GPU_WHY).format(count=gpu_count, provider=name)))
        count_why = _(WITH_RANGE).format(description=_(GPU_COUNT_WHY),
                                         range=value_range(InstanceConfig.model_fields["gpu_count"]))
        text = set_key(text, "instance", "gpu_count", key_lines("gpu_count", gpu_count, count_why))
        if entry is not None:
            price = entry.price_per_gpu_hour * gpu_count
            why = _(PRICE_WHY_ESTIMATED if entry.estimated else PRICE_WHY).format(
                count=gpu_count, gpu=resolved, price=format_amount(entry.price_per_gpu_hour, currency), provider=name,
                seen=entry.seen.isoformat())
            text = set_key(text, "instance", "price_per_hour",
                           key_lines("price_per_hour", str(price), _two_sentences(why, note)))
        else:
            why = _(NO_PRICE_WHY).format(currency=currency, gpu=resolved, provider=name)
            text = set_key(text, "instance", "price_per_hour",
                           key_lines("price_per_hour", "...", _two_sentences(why, note), commented=True, raw=True))
    elif note:
        text = set_key(text, "instance", "price_per_hour",
                       key_lines("price_per_hour", "...", note, commented=True, raw=True))
    part = providers_part(text)
    if credential_env(name) and part is not None:  # an account's adapter: its table and credential
        text = text[:part] + _provider_table(name, preset)
    tomllib.loads(text)  # never write a file that is not TOML
    return text


def _configured_language() -> str | None:
    """``[ui] language`` as ``costctl init`` follows it: the one rule of the command line
    (:func:`costctl.cli.language.configured_language`: ``COSTCTL_UI__LANGUAGE``, else the config file
    costctl would read, ``$COSTCTL_CONFIG`` or ./costctl.toml; None lets the locale decide)."""
    from .language import configured_language

    return configured_language([])


def init(
    path: Annotated[Path, typer.Argument(help=_("Where to write it."))] = Path(CONFIG_FILE_NAME),
    force: Annotated[bool, typer.Option("--force", help=_("Overwrite an existing file."))] = False,
    provider: Annotated[str | None, typer.Option("--provider", "-p", help=_(
        "Write it ready for this provider's machines (an installed adapter's name): its currency, timezone, the "
        "checkpoint path that survives a stop, its self-stop, its credential; each choice explained in a "
        "comment."))] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help=_(
        "With --provider: the card the instance rents; its price in costctl's table becomes the price_per_hour "
        "fallback."))] = None,
    gpu_count: Annotated[int, typer.Option("--gpu-count", help=_("With --provider: GPUs per instance."),
                                           min=1, max=64)] = 1,
) -> None:
    """Write a commented example config (every key with its default), or one ready for a
    provider (--provider), its comments in the language shown."""
    set_language(_configured_language())
    if path.is_dir():
        raise UsageError(_("{path} is a directory; give a file path, e.g. {example}").format(
            path=path, example=path / CONFIG_FILE_NAME))
    if path.exists() and not force:
        raise UsageError(_("{path} already exists; use --force to overwrite it").format(path=path))
    require_regular_file(path)  # --force over a FIFO would block, over a device write into it
    if provider is None and (gpu is not None or gpu_count != 1):
        raise UsageError(_("--gpu and --gpu-count describe the instance of a --provider; give --provider too"))
    text = example_config() if provider is None else provider_config(provider.strip().lower(), gpu=gpu,
                                                                          gpu_count=gpu_count)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(_("cannot write {path}: {error}").format(path=path, error=exc.strerror)) from None
    err_console.print(_("wrote {path}").format(path=path))


def register(app: typer.Typer) -> None:
    """Add ``init`` to ``app``."""
    app.command("init", help=_("Write a commented example config (every key with its default), or one ready for "
                               "a provider (--provider); its comments in Simplified Chinese or English, as the "
                               "language is chosen."))(init)
