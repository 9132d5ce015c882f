"""Money: a Decimal amount with an ISO 4217 currency code. Never a float.

Two amounts in different currencies are never added; converting needs an explicit
:class:`ExchangeRate` (with the date it was seen).

Bounds: every amount costctl takes in — a price per hour from the configuration, the command
line or a provider, a budget cap, a saving — lies in ``[0, MAX_AMOUNT]`` (10^9 units of its
currency) and is kept to :data:`AMOUNT_PLACES` decimals (rounded half-even when given with
more). The bound is costctl's own choice: far above any real hourly price or cap in any
currency (an 8-GPU H100 node is about 30 USD, 220 CNY or 500,000 IDR per hour), and low enough
that a charge, a run's spend and a bill's total stay exact to the micro-unit within Decimal's
default 28 significant digits. Rounding for display (:func:`round_money`) never fails for a
finite amount, however large.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation

from .errors import ConfigError, CostctlError, CurrencyMismatchError
from .i18n import N_, _, format_amount

SECONDS_PER_HOUR = Decimal(3600)

#: The largest amount of money costctl takes in (a price per hour, a cap), in units of its
#: currency: 10^9. See the module docstring for why.
MAX_AMOUNT = Decimal(10) ** 9
#: Decimal places an amount taken in keeps (more are rounded half-even): 10, far below any
#: currency's smallest unit (AutoDL bills in 1/1000 yuan; Vast.ai prices are floats).
AMOUNT_PLACES = 10
#: What an amount taken in may be, as the text after "expected" in error messages.
AMOUNT_ALLOWED = N_("an amount of money from 0 to 1000000000, like 2.5 or \"2.50\"")


class AmountError(CostctlError):
    """An amount of money outside ``[0, MAX_AMOUNT]``, or no finite number (exit status 2).

    Attributes:
        value: what was given (as given).
    """

    exit_code = 2

    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value


#: ISO 4217 codes that name no money: no currency (``XXX``) and the testing code (``XTS``).
NOT_MONEY = frozenset({"XXX", "XTS"})


def known_currencies() -> frozenset[str]:
    """The ISO 4217 currency codes costctl knows (upper case): the Unicode CLDR's list, as Babel
    ships it (current and historical codes), less :data:`NOT_MONEY`."""
    from babel.numbers import list_currencies

    return frozenset(code.upper() for code in list_currencies()) - NOT_MONEY


def is_known_currency(code: str) -> bool:
    """Whether ``code`` (any case) is a currency code in :func:`known_currencies`."""
    return code.upper() in known_currencies()


def parse_decimal(value: object, *, what: str = "amount") -> Decimal:
    """Parse ``value`` (str, int, Decimal, or float via its shortest repr) into a finite Decimal.

    Floats are converted through ``repr`` (so ``2.5`` becomes ``Decimal('2.5')``, not the
    binary expansion). Text is ASCII decimal or scientific notation: ``"1_000"`` (Python's
    digit grouping, which ``Decimal()`` accepts) and non-ASCII digits are no number.

    Raises:
        ConfigError: if the value is not a finite number.
    """
    if isinstance(value, bool):
        raise ConfigError(_("{what}: {value!r} is not a number").format(what=what, value=value))
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))
    elif isinstance(value, str):
        # Decimal() also reads "1_000" (Python's digit grouping) and non-ASCII digits: as money a
        # user writes "1000", so only ASCII text without underscores is a number here
        if "_" in value or not value.isascii():
            raise ConfigError(_("{what}: {value!r} is not a number").format(what=what, value=value))
        try:
            result = Decimal(value.strip())
        except InvalidOperation:
            raise ConfigError(_("{what}: {value!r} is not a number").format(what=what, value=value)) from None
    else:
        raise ConfigError(_("{what}: {value!r} is not a number").format(what=what, value=value))
    if not result.is_finite():
        raise ConfigError(_("{what}: {value!r} is not a finite number").format(what=what, value=value))
    return result


def bounded_amount(value: object, *, what: str = "amount") -> Decimal:
    """``value`` (str, int, Decimal, or float via its shortest repr) as an amount of money taken
    in: a finite Decimal in ``[0, MAX_AMOUNT]``, as written when it has at most
    :data:`AMOUNT_PLACES` decimals, else rounded half-even to them (``"1e-400"`` is 0,
    ``0.28666666666666667`` is ``0.2866666667``); an exponent is written out (``"1e3"`` is 1000).

    Raises:
        AmountError: not a finite number, negative, or over :data:`MAX_AMOUNT`; the message
            names ``what``, the value and the range.
    """
    try:
        amount = parse_decimal(value, what=what)
    except ConfigError as exc:
        raise AmountError(_("{problem}; expected {allowed}").format(problem=exc.message, allowed=_(AMOUNT_ALLOWED)),
                          value) from None
    if amount < 0 or amount > MAX_AMOUNT:
        shown = str(value) if len(str(value)) <= 40 else str(value)[:37] + "..."
        raise AmountError(_("{what}: {value} is outside the range; expected {allowed}").format(
            what=what, value=shown, allowed=_(AMOUNT_ALLOWED)), value)
    exponent = amount.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    if exponent < -AMOUNT_PLACES:
        amount = round_money(amount, AMOUNT_PLACES)
        amount = amount.quantize(Decimal(1)) if amount == amount.to_integral_value() else amount.normalize()
    elif exponent > 0:
        amount = amount.quantize(Decimal(1))
    return amount.copy_abs()  # -0 is 0


#: The largest magnitude :func:`round_money` rounds: 10^30, beyond anything a bill can hold
#: (a rate of at most :data:`MAX_AMOUNT` per hour over the ten thousand years a timestamp spans
#: is under 10^17).
MAX_ROUNDED = Decimal(10) ** 30


def round_money(amount: Decimal, places: int) -> Decimal:
    """``amount`` rounded half-even to ``places`` decimals (0 to 28), for any finite amount up
    to :data:`MAX_ROUNDED` in magnitude, however many digits it has (Decimal's own
    ``quantize`` fails past 28 significant digits).

    Raises:
        AmountError: ``amount`` is NaN or infinite, or larger than :data:`MAX_ROUNDED`.
    """
    if not amount.is_finite():
        raise AmountError(_("{amount} is not a finite amount of money").format(amount=amount), amount)
    if abs(amount) > MAX_ROUNDED:
        raise AmountError(_("{amount:.6e} is too large an amount of money (at most 1e30)").format(amount=amount), amount)
    digits = max(amount.adjusted(), 0) + places + 2
    return amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN,
                           context=Context(prec=max(28, digits)))


@dataclass(frozen=True, slots=True)
class Money:
    """An amount of money.

    Attributes:
        amount: Decimal, unrounded.
        currency: upper-case ISO 4217 code, e.g. ``"USD"``, ``"CNY"``.
    """

    amount: Decimal
    currency: str

    def __post_init__(self) -> None:
        if not isinstance(self.amount, Decimal):
            raise TypeError("Money.amount must be a Decimal")
        object.__setattr__(self, "currency", self.currency.upper())

    def _check(self, other: "Money") -> None:
        if not isinstance(other, Money):
            raise TypeError("can only combine Money with Money")
        if other.currency != self.currency:
            raise CurrencyMismatchError(
                _("cannot combine {a} and {b} without an exchange rate").format(a=self.currency, b=other.currency)
            )

    def __add__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: "Money") -> "Money":
        self._check(other)
        return Money(self.amount - other.amount, self.currency)

    def __mul__(self, factor: Decimal | int) -> "Money":
        if isinstance(factor, float):
            raise TypeError("multiply Money by Decimal or int, not float")
        return Money(self.amount * Decimal(factor), self.currency)

    __rmul__ = __mul__

    def __lt__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount < other.amount

    def __le__(self, other: "Money") -> bool:
        self._check(other)
        return self.amount <= other.amount

    @classmethod
    def zero(cls, currency: str) -> "Money":
        """Zero in ``currency``."""
        return cls(Decimal(0), currency)

    def rounded(self, places: int = 2) -> Decimal:
        """The amount rounded half-even to ``places`` decimals (display only; never fails for
        a finite amount, see :func:`round_money`)."""
        return round_money(self.amount, places)

    def shown(self) -> str:
        """This amount for people, as the current language writes money
        (:func:`costctl.i18n.format_amount`): ``$0.0123``, ``$1,234.57``, ``CN¥1.09`` in English,
        ``US$0.0123``, ``¥1,008.00`` in Chinese."""
        return format_amount(self.amount, self.currency)

    def __str__(self) -> str:
        """``"0.69 USD"``: the amount rounded half-even to 2 places and the currency code, the same
        in every language. For logs and machine text (``json.dumps(..., default=str)`` of a
        decision's evidence writes it); never for a sentence people read: that is :meth:`shown`."""
        return f"{self.rounded(2)} {self.currency}"


def cost_of(rate_per_hour: Decimal, seconds: Decimal | float | int | timedelta) -> Decimal:
    """Spend for ``seconds`` at ``rate_per_hour`` (currency units per instance-hour), unrounded.

    ``seconds`` may be a timedelta (microsecond precision is kept exactly).
    """
    if isinstance(seconds, timedelta):
        secs = Decimal(seconds.days * 86400 + seconds.seconds) + Decimal(seconds.microseconds) / Decimal(
            1_000_000
        )
    elif isinstance(seconds, float):
        secs = Decimal(repr(seconds))
    else:
        secs = Decimal(seconds)
    return rate_per_hour * secs / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class ExchangeRate:
    """``1 base = rate quote``, as seen on ``as_of`` (e.g. 1 USD = 7.1 CNY on 2026-11-01)."""

    base: str
    quote: str
    rate: Decimal
    as_of: date

    def convert(self, money: Money) -> Money:
        """Convert ``money`` (in base or quote) into the other currency.

        Raises:
            CurrencyMismatchError: if ``money`` is in neither currency of this rate.
        """
        cur = money.currency
        if cur == self.base.upper():
            return Money(money.amount * self.rate, self.quote)
        if cur == self.quote.upper():
            return Money(money.amount / self.rate, self.base)
        raise CurrencyMismatchError(_("rate {base}/{quote} cannot convert {currency}").format(
            base=self.base, quote=self.quote, currency=cur))


__all__ = ["Money", "ExchangeRate", "cost_of", "parse_decimal", "bounded_amount", "round_money", "AmountError",
           "SECONDS_PER_HOUR", "MAX_AMOUNT", "AMOUNT_PLACES", "AMOUNT_ALLOWED"]
