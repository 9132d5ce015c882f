"""The message catalogues (costctl.i18n): every user-facing string literal goes through the
translation function, every message has a Simplified Chinese entry with the same placeholders,
and the committed ``.mo`` is the compilation of its ``.po``.

The AST check: a string literal with letters in it, or an f-string, passed as an argument to the
console (``*.print``, ``print``, ``typer.echo``, ``print_line``, a rich table's column or ``title=``), to
``CostctlError`` or any of its subclasses, or as a typer ``help=``/``short_help=``/``epilog=``,
is a finding; so is an
f-string given to ``_()`` (sentences have named placeholders, formatted after translation) and
a literal glued to a translated sentence with ``+``.
"""

from __future__ import annotations

import ast
import functools
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p for base in ("costctl", "providers") for p in sorted((ROOT / base).rglob("*.py"))]
PO = ROOT / "costctl" / "locale" / "zh_CN" / "LC_MESSAGES" / "costctl.po"
MO = PO.with_suffix(".mo")

#: modules whose messages are not converted yet (issue 16, part 3): the list only shrinks.
PENDING = frozenset(
    line.strip() for line in (ROOT / "tests" / "data" / "i18n_pending.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
) if (ROOT / "tests" / "data" / "i18n_pending.txt").exists() else frozenset()

CONSOLE_FUNCS = {"print", "echo", "secho", "print_line", "warn_line", "add_column", "Table"}
HELP_KEYWORDS = {"help", "short_help", "epilog", "title", "caption"}


def _error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    """CostctlError and every class deriving from it (by name, over all sources)."""
    names = {"CostctlError"}
    changed = True
    while changed:
        changed = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names:
                    bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
                             for b in node.bases}
                    if bases & names:
                        names.add(node.name)
                        changed = True
    return names


def _callee(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _receiver(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        v = f.value
        return v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
    return ""


def _is_text(node: ast.AST) -> bool:
    """A literal people read: a str constant with a letter in it, or an f-string with one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c.isalpha() for c in node.value)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and any(c.isalpha() for c in str(v.value)) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.IfExp):
        return _is_text(node.body) or _is_text(node.orelse)
    return False


def _sqlalchemy_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """``(names bound to sqlalchemy's Table, names bound to the sqlalchemy module)`` in ``tree``:
    a SQLAlchemy ``Table("runs", ...)`` is no rich table."""
    tables, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            tables |= {a.asname or a.name for a in node.names if a.name == "Table"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "sqlalchemy"}
    return tables, modules


def findings(path: Path, tree: ast.Module, errors: set[str]) -> list[str]:
    """``file:line: what`` for each untranslated user-facing literal in ``tree``."""
    rel = path.relative_to(ROOT).as_posix()
    out = []
    sa_tables, sa_modules = _sqlalchemy_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node)
        where = f"{rel}:{node.lineno}"
        if name == "_" and node.args and isinstance(node.args[0], ast.JoinedStr):
            out.append(f"{where}: an f-string given to _(): use named placeholders and .format()")
            continue
        if (isinstance(node.func, ast.Name) and node.func.id in sa_tables) or (
                name == "Table" and isinstance(node.func, ast.Attribute) and _receiver(node) in sa_modules):
            continue  # a database table's name and columns
        user_facing = (
            name in errors
            or (name in CONSOLE_FUNCS and (name != "print" or not _receiver(node) or "console" in _receiver(node).lower()))
            or (name == "print" and "console" in _receiver(node).lower())
        )
        if user_facing:
            for arg in node.args:
                if _is_text(arg):
                    out.append(f"{where}: {name}() gets an untranslated literal")
        for kw in node.keywords:
            if kw.arg in HELP_KEYWORDS and _is_text(kw.value):
                out.append(f"{where}: {kw.arg}= is an untranslated literal")
    return out


@functools.lru_cache(maxsize=1)
def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in SOURCES}


def test_every_user_facing_literal_goes_through_the_translation_function() -> None:
    trees = _trees()
    errors = _error_classes(trees)
    assert {"ConfigError", "UsageError", "LedgerError", "ProviderError"} <= errors
    found = [f for p, t in trees.items() if p.relative_to(ROOT).as_posix() not in PENDING
             for f in findings(p, t, errors)]
    assert not found, f"{len(found)} untranslated user-facing literals:\n" + "\n".join(found[:80])


def test_the_checker_finds_what_it_must() -> None:
    """The AST check itself: each kind of finding, and what it must leave alone."""
    src = '''
from costctl.errors import UsageError
class MyError(UsageError): ...
def f(x, console):
    raise UsageError(f"bad {x}")
    raise MyError("bad value")
    console.print("hello")
    typer.Option(None, help="some help")
    print("plain")
    _(f"no {x}")
    raise UsageError(_("bad {x}").format(x=x))
    console.print(_("hello"))
    console.print("")
    console.print(" - ")
    typer.Option(None, help=_("some help"))
    sa.Table("runs", meta, sa.Column("id", sa.String(32)))
    Table("charges", meta)
    rich.table.Table("Spend")
'''
    tree = ast.parse("import sqlalchemy as sa\nfrom sqlalchemy import Table\n" + src)
    trees = {ROOT / "costctl" / "x.py": tree}
    errors = _error_classes({**_trees(), **trees})
    lines = [f.split(": ", 1)[1] for f in findings(ROOT / "costctl" / "x.py", tree, errors)]
    assert lines == [
        "UsageError() gets an untranslated literal",
        "MyError() gets an untranslated literal",
        "print() gets an untranslated literal",
        "help= is an untranslated literal",
        "print() gets an untranslated literal",
        "an f-string given to _(): use named placeholders and .format()",
        "Table() gets an untranslated literal",
    ]


def _catalog():
    from babel.messages.pofile import read_po

    with PO.open("rb") as f:
        return read_po(f, locale="zh_CN")


def _extracted() -> dict[str, tuple[str, ...]]:
    """msgid -> all its ids (singular, plural) as Babel extracts them from the sources."""
    from babel.messages.extract import extract_from_dir

    keywords = {"_": None, "N_": None, "ngettext": (1, 2)}
    out: dict[str, tuple[str, ...]] = {}
    for base in ("costctl", "providers"):
        for _file, _line, message, _comments, _ctx in extract_from_dir(
                str(ROOT / base), method_map=[("**.py", "python")], keywords=keywords):
            ids = message if isinstance(message, tuple) else (message,)
            out[ids[0]] = ids
    return out


PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)(?:![rsa])?(?::[^{}]*)?\}")


def test_every_message_has_a_chinese_entry_with_the_same_placeholders() -> None:
    catalog = _catalog()
    extracted = _extracted()
    assert len(extracted) >= 50
    missing, empty, fuzzy, placeholders = [], [], [], []
    for msgid, ids in extracted.items():
        message = catalog.get(msgid)
        if message is None:
            missing.append(msgid)
            continue
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if not all(strings):
            empty.append(msgid)
        if message.fuzzy:
            fuzzy.append(msgid)
        wanted = set().union(*(set(PLACEHOLDER.findall(i)) for i in ids))
        for s in strings:
            if s and not set(PLACEHOLDER.findall(s)) <= wanted:
                placeholders.append(f"{msgid!r} -> {s!r}")
            if s and len(ids) == 1 and set(PLACEHOLDER.findall(s)) != wanted:
                placeholders.append(f"{msgid!r} -> {s!r}")
    assert not missing, f"{len(missing)} messages not in {PO.name} (tools/i18n.sh extract, update):\n" + "\n".join(map(repr, missing[:50]))
    assert not empty, f"{len(empty)} messages without a Chinese translation:\n" + "\n".join(map(repr, empty[:50]))
    assert not fuzzy, f"fuzzy entries: {fuzzy[:20]}"
    assert not placeholders, "placeholders differ:\n" + "\n".join(placeholders[:30])


def test_the_committed_mo_is_the_compiled_po() -> None:
    from babel.messages.mofile import read_mo, write_mo

    catalog = _catalog()
    buf = io.BytesIO()
    write_mo(buf, catalog)
    assert MO.read_bytes() == buf.getvalue(), "costctl.mo is stale: run tools/i18n.sh compile"
    with MO.open("rb") as f:
        compiled = read_mo(f)
    def ids(cat) -> set:
        return {tuple(m.id) if isinstance(m.id, (list, tuple)) else m.id for m in cat if m.id and m.string}

    assert ids(compiled) == ids(catalog)


@pytest.mark.parametrize("env, want", [
    ({"LANG": "zh_CN.UTF-8"}, "zh_CN"), ({"LC_ALL": "zh_CN.utf8", "LANG": "C"}, "zh_CN"),
    ({"LANG": "C"}, "en"), ({"LANG": "POSIX"}, "en"), ({}, "en"), ({"LANGUAGE": "zh_TW:en", "LANG": "C"}, "zh_CN"),
    ({"LANG": "en_US.UTF-8", "COSTCTL_UI__LANGUAGE": "zh_CN"}, "zh_CN"),
    ({"LANG": "zh_CN.UTF-8", "COSTCTL_UI__LANGUAGE": "en"}, "en"),
    ({"LANG": "zh_CN.UTF-8", "COSTCTL_UI__LANGUAGE": "auto"}, "zh_CN"),
])
def test_the_language_follows_the_documented_order(env, want) -> None:
    from costctl.i18n import choose_language

    assert choose_language(None, env) == want
    assert choose_language("en", env) == "en" and choose_language("zh_CN", env) == "zh_CN"
