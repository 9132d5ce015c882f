"""Translations: English message ids, Simplified Chinese from a gettext catalogue.

Every user-facing sentence goes through :func:`_` as a whole sentence with *named* placeholders,
formatted after translation (``_("run {run} stopped").format(run=...)``), never assembled from
fragments: word order differs between the languages. :func:`N_` marks a sentence kept in a
constant for translation where it is used.

Catalogues (GNU gettext, domain ``costctl``) live in ``costctl/locale/<lang>/LC_MESSAGES/``:
the ``.po`` source and its compiled ``.mo`` are both committed (``tests/test_i18n_catalog.py``
checks the ``.mo`` is the compilation of the ``.po``, with Babel). A catalogue is read on the
first translation that needs it, never at import.

Language (:func:`choose_language`), first that is set: ``[ui] language`` (or
``COSTCTL_UI__LANGUAGE``) unless ``auto``; then gettext's own order of the locale variables
``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``. ``zh*`` gives Simplified Chinese
(``zh_CN``); ``C``, ``POSIX`` and everything else English.

click and typer translate their own strings ("Usage:", "Options:", "Show this message and
exit.") through :func:`gettext.gettext`, bound when they are imported; :func:`install_for_cli`
(called by :mod:`costctl.cli` before it imports typer) points :mod:`gettext`'s module functions
at costctl's catalogue when the language is not English, so those strings come from the same
catalogue. Nothing is changed for English.
"""

from __future__ import annotations

import gettext as _gettext
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: gettext domain of costctl's catalogues.
DOMAIN = "costctl"
#: where the catalogues are: ``LOCALE_DIR / <lang> / "LC_MESSAGES" / "costctl.mo"``.
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: languages with a catalogue, besides English (the message ids).
LANGUAGES = ("zh_CN",)
#: the values ``[ui] language`` accepts.
CHOICES = ("auto", "en", "zh_CN")

_language: str | None = None
_translation: _gettext.NullTranslations | None = None


def _normalize(value: str) -> str | None:
    """``"zh_CN"`` for any Chinese locale name (``zh_CN.UTF-8``, ``zh-Hans``, ``zh``), ``"en"``
    for any other non-empty one, None for an empty one."""
    v = value.strip()
    if not v:
        return None
    lang = v.split(".")[0].split("@")[0].replace("-", "_")
    if lang.lower().startswith("zh"):
        return "zh_CN"
    return "en"


def choose_language(configured: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The language to show: ``"en"`` or ``"zh_CN"`` (see the module docstring for the order).

    Args:
        configured: ``[ui] language`` (``auto``, ``en``, ``zh_CN``; None = auto; any other
            value is skipped, like ``auto``).
        environ: the environment (default :data:`os.environ`).
    """
    env = os.environ if environ is None else environ
    valid = {c.lower() for c in CHOICES} - {"auto"}
    for value in (configured, env.get("COSTCTL_UI__LANGUAGE")):
        # a value that is not one of CHOICES is skipped: its error comes in the language the rest choose
        if value and value.strip().lower() in valid:
            found = _normalize(value)
            if found:
                return found
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var, "")
        if not value:
            continue
        first = value.split(":")[0]  # LANGUAGE is a list of preferences
        return _normalize(first) or "en"
    return "en"


def set_language(language: str | None) -> str:
    """Show messages in ``language`` from now on (``auto``/None: :func:`choose_language`);
    returns the language chosen."""
    global _language, _translation
    chosen = choose_language(language)
    if chosen != _language:
        _language, _translation = chosen, None
    return chosen


def language() -> str:
    """The language messages are shown in (chosen on first use)."""
    return _language if _language is not None else set_language(None)


def _catalogue() -> _gettext.NullTranslations:
    global _translation
    if _translation is None:
        lang = language()
        if lang == "en":
            _translation = _gettext.NullTranslations()
        else:
            _translation = _gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang], fallback=True)
    return _translation


class Text(str):
    """A translated message that remembers its English (canonical) text.

    The value is the message in the language shown to people; :attr:`canonical` is the same
    message in English, the form machine output stores (the ledger's reasons, details and
    outcomes, JSON fields), so what a watch writes does not depend on its language.
    :meth:`format` keeps both: each placeholder value that is itself a :class:`Text` goes in as
    its English in the canonical text. Any other str operation (``+``, f-strings, ``join``)
    gives a plain ``str`` in the shown language.
    """

    __slots__ = ("canonical",)
    canonical: str

    def __new__(cls, shown: str, canonical: str) -> Text:
        obj = super().__new__(cls, shown)
        obj.canonical = canonical
        return obj

    def format(self, *args: Any, **kwargs: Any) -> Text:  # type: ignore[override]
        """Both texts formatted (placeholders in English in the canonical one)."""
        shown = str.format(self, *args, **kwargs)
        english = self.canonical.format(*(canonical(a) for a in args),
                                        **{k: canonical(v) for k, v in kwargs.items()})
        return Text(shown, english)

    def join(self, parts: Any) -> Text:  # type: ignore[override]
        """Both texts joined (this separator's English between the parts' English)."""
        items = list(parts)
        return Text(str.join(self, items), self.canonical.join(str(canonical(p)) for p in items))

    def __add__(self, other: str) -> Text:  # type: ignore[override]
        """Both texts followed by ``other`` (its English in the canonical text)."""
        return Text(str.__add__(self, other), self.canonical + str(canonical(other)))

    def __radd__(self, other: str) -> Text:
        return Text(str.__add__(other, self), str(canonical(other)) + self.canonical)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Text, (str(self), self.canonical))


def canonical(value: Any) -> Any:
    """``value``'s English text when it is a :class:`Text`, else ``value`` unchanged (a plain
    str is taken as already canonical; an exception whose message is a :class:`Text` gives that
    message's English)."""
    if isinstance(value, BaseException) and len(value.args) == 1 and isinstance(value.args[0], Text):
        return value.args[0].canonical
    return value.canonical if isinstance(value, Text) else value


def text_map(fn: Any, value: str) -> str:
    """``fn(value)`` (a str -> str function: a redaction, a trim) applied to both texts of a
    :class:`Text`, so the English survives it; for a plain str just ``fn(value)``."""
    if isinstance(value, Text):
        return Text(fn(str(value)), fn(value.canonical))
    return fn(value)


def canonical_data(value: Any) -> Any:
    """``value`` (JSON-like data: dicts, lists, tuples, scalars) with every :class:`Text` in it
    replaced by its English text: for machine output (JSON, CSV, the ledger)."""
    if isinstance(value, Text):
        return value.canonical
    if isinstance(value, dict):
        return {canonical_data(k): canonical_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_data(v) for v in value] if isinstance(value, list) else \
            tuple(canonical_data(v) for v in value)
    return value


@contextmanager
def in_language(lang: str) -> Iterator[str]:
    """Show messages in ``lang`` (``en``, ``zh_CN``) inside the block, then in the language
    before it again; yields the language chosen."""
    global _language, _translation
    before = (_language, _translation)
    try:
        yield set_language(lang)
    finally:
        _language, _translation = before


def _(message: str) -> str:
    """``message`` (an English sentence, the message id) in the current language; in a
    language other than English a :class:`Text` that also holds the English."""
    if _language == "en" or (_language is None and language() == "en"):
        return message
    return Text(_catalogue().gettext(message), message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural sentence for ``n``, in the current language (a :class:`Text`
    holding the English in a language other than English)."""
    english = singular if n == 1 else plural
    if language() == "en":
        return english
    return Text(_catalogue().ngettext(singular, plural, n), english)


def N_(message: str) -> str:
    """Mark ``message`` for the catalogue without translating it now (translate it with
    :func:`_` where it is shown)."""
    return message


#: The one mapping of machine values (as the ledger, the providers' adapters, the price table and
#: JSON keep them) to the words people read: run and instance statuses, stop states, billing
#: kinds with their tiers (whole labels, never assembled), decision actions, AutoDL's no-GPU mode.
#: JSON and CSV keep the values; tables, the dashboard and the status line show
#: :func:`display_word`. Policy names (``idle``, ``budget``...) are not here: they are the names of
#: ``[policies.<name>]`` tables in the config, shown as they are written there.
DISPLAY_WORDS: dict[str, str] = {
    # run statuses (the ledger's ``runs.status``) and provider statuses (``Status`` values)
    "running": N_("running"), "completed": N_("completed"), "failed": N_("failed"), "stopped": N_("stopped"),
    "preempted": N_("preempted"), "stop failed": N_("stop failed"), "self-stop sent": N_("self-stop sent"),
    "failed-to-start": N_("failed-to-start"), "downsized": N_("downsized"), "unguarded": N_("unguarded"),
    "lost": N_("lost"), "interrupted": N_("interrupted"), "provisioning": N_("provisioning"),
    "starting": N_("starting"), "stopping": N_("stopping"), "terminated": N_("terminated"), "error": N_("error"),
    "unknown": N_("unknown"),
    # stop states
    "requested": N_("requested"), "sent": N_("sent"), "confirmed": N_("confirmed"), "gone": N_("gone"),
    # billing kinds and tiers (PriceEntry.label, [instance] billing)
    "on-demand": N_("on-demand"), "on-demand community": N_("on-demand community"),
    "on-demand secure": N_("on-demand secure"), "spot": N_("spot"), "spot community": N_("spot community"),
    "interruptible": N_("interruptible"), "prepaid": N_("prepaid"), "prepaid monthly": N_("prepaid monthly"),
    "from": N_("from"), "from on-demand listings": N_("from on-demand listings"),
    "from interruptible listings": N_("from interruptible listings"),
    # decision actions
    "stop": N_("stop"), "start": N_("start"), "advise": N_("advise"), "warn": N_("warn"), "mark": N_("mark"),
    "release": N_("release"), "downsize": N_("downsize"), "checkpoint": N_("checkpoint"), "retry": N_("retry"),
    "resume": N_("resume"), "snooze": N_("snooze"),
    # price-table rows that are not a card
    "no-GPU mode": N_("no-GPU mode"),
}


def display_word(value: object) -> str:
    """``value`` (a machine value: a status, a billing kind, an action; an enum's ``.value``
    is taken) as people read it in the current language (:data:`DISPLAY_WORDS`); a value not
    in the mapping is shown as it is (a provider's own status word, a proper name)."""
    raw = getattr(value, "value", value)
    found = DISPLAY_WORDS.get(str(raw))
    return _(found) if found else str(raw)


def install_for_cli() -> None:
    """Give click's and typer's own strings costctl's catalogue (call before importing them).

    For a language other than English, :func:`gettext.gettext` and :func:`gettext.ngettext`
    become costctl's; they still return the message unchanged when the catalogue has no entry.
    """
    if language() == "en":
        return
    catalogue = _catalogue()
    _gettext.gettext = catalogue.gettext  # type: ignore[assignment]
    _gettext.ngettext = catalogue.ngettext  # type: ignore[assignment]


def format_money(amount: Any, currency: str, *, places: int = 2, currency_digits: bool = True) -> str:
    """``amount`` (Decimal) in ``currency`` for people, by the current language's locale rules
    (Babel, CLDR data): ``¥1,234.57`` in Chinese, ``CN¥1,234.57`` / ``$1,234.57`` in English.

    Args:
        amount: a Decimal (never a float); rounded half-even to ``places`` decimals for display.
        currency: ISO 4217 code.
        currency_digits: with ``places`` 2, show the currency's own number of decimals (CLDR:
            ``JP¥3`` for 3.00 JPY); False shows exactly ``places`` decimals whatever the currency
            (a table whose cells must add up as shown, to the cent, in every currency).
    """
    if language() != "en":
        shown = _format_money(amount, currency, "zh_CN", places, currency_digits)
        return Text(shown, _format_money(amount, currency, "en_US", places, currency_digits))
    return _format_money(amount, currency, "en_US", places, currency_digits)


def _format_money(amount: Any, currency: str, locale: str, places: int, currency_digits: bool) -> str:
    """:func:`format_money` by Babel's ``locale`` (``zh_CN``, ``en_US``)."""
    from decimal import Decimal, localcontext

    from babel.numbers import format_currency

    q = _round(Decimal(amount), places)
    with localcontext() as ctx:  # Babel rounds again in the current context: room for every digit
        ctx.prec = max(28, q.adjusted() + places + 2)
        if places == 2 and currency_digits:
            return format_currency(q, currency.upper(), locale=locale)
        pattern = "¤#,##0" + ("." + "0" * places if places > 0 else "")
        return format_currency(q, currency.upper(), format=pattern, locale=locale, currency_digits=False)


def _round(value: Any, places: int) -> Any:
    """``value`` (a finite Decimal) rounded half-even to ``places`` decimals, with as many digits
    as it needs (Decimal's default 28 would fail on a long amount); display only."""
    from decimal import ROUND_HALF_EVEN, Context, Decimal

    digits = max(value.adjusted(), 0) + places + 2
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN, context=Context(prec=max(28, digits)))


#: The most decimals a free-standing amount of money is shown with (:func:`format_amount`): 4,
#: for an amount under one unit of its currency, so a Vast.ai price of 0.0123 USD/h reads
#: ``$0.0123``, not ``$0.01`` (costctl's choice: marketplaces list prices to the 1/10,000 of a
#: dollar, AutoDL bills in 1/1,000 yuan).
SMALL_AMOUNT_PLACES = 4


def amount_places(amount: Any) -> int:
    """How many decimals :func:`format_amount` shows ``amount`` (a Decimal) with: 2 when its
    magnitude, rounded half-even to :data:`SMALL_AMOUNT_PLACES` decimals, is 0 or at least 1;
    below 1, the decimals it needs at that rounding, at least 2 (0.5 → 2, 0.0123 → 4)."""
    from decimal import Decimal

    q = _round(Decimal(amount), SMALL_AMOUNT_PLACES)
    if q == 0 or abs(q) >= 1:
        return 2
    exponent = q.normalize().as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    return min(max(2, -exponent), SMALL_AMOUNT_PLACES)


def format_amount(amount: Any, currency: str | None) -> str:
    """A free-standing amount of money for people (a price per hour, a spend, a saving, a budget
    cap; everywhere money is shown, except a table whose cells must add up to its totals as
    shown, which uses :func:`format_money` with fixed places), as the current language writes it.

    The rule: from 1 up (in magnitude), 2 decimals, or the currency's own (CLDR: ``JP¥3``), with
    the locale's thousands separators (``$1,234.57``, ``¥1,008.00``); below 1, rounded half-even
    to :data:`SMALL_AMOUNT_PLACES` decimals and written with as many as it needs, at least 2
    (``$0.50``, ``$0.0123``, ``CN¥0.125``); a non-zero amount that would show as 0 is
    ``<$0.0001`` (``>-$0.0001`` below zero); zero is ``$0.00``.

    Args:
        amount: a Decimal (never a float), in units of ``currency``.
        currency: ISO 4217 code; None gives the number alone, by the same rule (``0.0123``, for a
            range that names its currency once: see :func:`costctl.report.price_range_cell`).
    """
    from decimal import Decimal

    value = Decimal(amount)
    places = amount_places(value)
    if value != 0 and _round(value, SMALL_AMOUNT_PLACES) == 0:
        edge = Decimal(1).scaleb(-SMALL_AMOUNT_PLACES) * (1 if value > 0 else -1)
        return ("<" if value > 0 else ">") + format_amount(edge, currency)
    if currency is None:
        return format_number(_round(value, places), places=places)
    if places == 2:
        return format_money(value, currency)
    return format_money(value, currency, places=places, currency_digits=False)


def format_number(value: Any, *, places: int | None = None) -> str:
    """``value`` with the locale's thousands separators (Babel), ``places`` decimals when given."""
    from decimal import Decimal, localcontext

    from babel.numbers import format_decimal

    locale = "zh_CN" if language() == "zh_CN" else "en_US"
    fmt = None if places is None else ("#,##0." + "0" * places if places > 0 else "#,##0")
    with localcontext() as ctx:  # room for every digit of a long Decimal when Babel rounds it
        if isinstance(value, Decimal) and value.is_finite():
            ctx.prec = max(28, value.adjusted() + (places or 0) + 2)
        return format_decimal(value, format=fmt, locale=locale)


def format_time(when: Any, tz: Any = None) -> str:
    """An aware datetime for people: in ``tz`` (a :class:`zoneinfo.ZoneInfo`; UTC when None),
    to the second, with the zone's offset (``2026-12-05 22:52:07+08:00``); never microseconds."""
    from datetime import timezone

    shown = when.astimezone(tz or timezone.utc).replace(microsecond=0)
    return shown.isoformat(sep=" ")


__all__ = ["CHOICES", "DOMAIN", "LANGUAGES", "LOCALE_DIR", "N_", "SMALL_AMOUNT_PLACES", "Text", "_", "amount_places",
           "canonical", "canonical_data", "choose_language", "display_word", "text_map", "DISPLAY_WORDS", "format_amount", "format_money", "format_number",
           "format_time", "in_language", "install_for_cli",
           "language", "ngettext", "set_language"]
