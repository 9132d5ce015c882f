"""A translated message keeps its English (``costctl.i18n.Text``): what the ledger and JSON store
does not depend on the language shown (issue 16, part 3)."""

from __future__ import annotations

from decimal import Decimal

from costctl import i18n
from costctl.errors import CostctlError
from costctl.i18n import _, canonical, canonical_data, ngettext, text_map


def test_format_join_and_plus_keep_the_english_with_english_placeholders() -> None:
    with i18n.in_language("zh_CN"):
        route = _("API ({detail})").format(detail=_("instance read"))
        said = _("; ").join([route, _("no SSH session")]) + "!"
        money = i18n.format_money(Decimal("1.5"), "CNY")
        count = ngettext("{first} / {best} / {last}  [{points} point]",
                         "{first} / {best} / {last}  [{points} points]", 1).format(first=1, best=1, last=1, points=1)
        error = CostctlError(_("instance read"))
    assert str(route) != canonical(route) and canonical(route) == "API (instance read)"
    assert canonical(said) == "API (instance read); no SSH session!"
    assert str(money) == "¥1.50" and canonical(money) == "CN¥1.50"
    assert canonical(count) == "1 / 1 / 1  [1 point]"
    assert canonical(error) == "instance read"
    assert canonical_data({"a": [route], "b": (said,)}) == {"a": ["API (instance read)"],
                                                             "b": ("API (instance read); no SSH session!",)}
    assert canonical(text_map(str.upper, route)) == "API (INSTANCE READ)"
    assert i18n.language() == "en"  # in_language put the language back


def test_in_english_nothing_changes() -> None:
    with i18n.in_language("en"):
        said = _("API ({detail})").format(detail=_("instance read"))
    assert type(said) is str and canonical(said) == said == "API (instance read)"
