"""``costctl init``: write a commented example ``costctl.toml``.

The shipped example (``costctl/data/costctl.example.toml``) is written as it is, except for the
part between :data:`POLICIES_BEGIN` and :data:`POLICIES_END`: that is generated from the
registered policies' config models (:func:`policies_toml`), so every policy, a third-party one
included, gets its table with each key, its default, and its description and bounds as a comment.
"""

from __future__ import annotations

import json
import re
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

    from ..policies import PolicySpec

#: Markers around the generated ``[policies.*]`` tables in the example config.
POLICIES_BEGIN = "# ---- [policies.*]: generated from each policy's config model (costctl init) ----"
POLICIES_END = "# ---- end of [policies.*] ----"

#: Column at which a key's comment starts (when the key = value fits before it).
COMMENT_COLUMN = 28


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


def init(
    path: Annotated[Path, typer.Argument(help="Where to write it.")] = Path(CONFIG_FILE_NAME),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example config (every key with its default)."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a file path, e.g. {path / CONFIG_FILE_NAME}")
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; use --force to overwrite it")
    text = example_config()
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    err_console.print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add ``init`` to ``app``."""
    app.command("init")(init)
