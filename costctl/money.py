"""Money: a Decimal amount with an ISO 4217 currency code. Never a float.

Two amounts in different currencies are never added; converting needs an explicit
:class:`ExchangeRate` (with the date it was seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation

from .errors import ConfigError, CurrencyMismatchError

SECONDS_PER_HOUR = Decimal(3600)


def parse_decimal(value: object, *, what: str = "amount") -> Decimal:
    """Parse ``value`` (str, int, Decimal, or float via its shortest repr) into a finite Decimal.

    Floats are converted through ``repr`` (so ``2.5`` becomes ``Decimal('2.5')``, not the
    binary expansion).

    Raises:
        ConfigError: if the value is not a finite number.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not a number")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            result = Decimal(value.strip())
        except InvalidOperation:
            raise ConfigError(f"{what}: {value!r} is not a number") from None
    else:
        raise ConfigError(f"{what}: {value!r} is not a number")
    if not result.is_finite():
        raise ConfigError(f"{what}: {value!r} is not a finite number")
    return result


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
                f"cannot combine {self.currency} and {other.currency} without an exchange rate"
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
        """The amount rounded half-even to ``places`` decimals (display only)."""
        return self.amount.quantize(Decimal(1).scaleb(-places))

    def __str__(self) -> str:
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
        raise CurrencyMismatchError(f"rate {self.base}/{self.quote} cannot convert {cur}")


__all__ = ["Money", "ExchangeRate", "cost_of", "parse_decimal", "SECONDS_PER_HOUR"]
