"""Errors that costctl reports to the user as one line.

Every error a user can cause (a bad config value, a missing command, an unreachable database)
is a :class:`CostctlError`: the CLI prints ``costctl: <message>`` on stderr and exits with
``exit_code``. Anything else is a bug: the CLI still prints one line, but writes the full
traceback to a log file in the user log dir and names that file.
"""

from __future__ import annotations


class CostctlError(Exception):
    """Root of costctl's user-facing errors.

    Attributes:
        message: one line, naming what is wrong and what is allowed.
        exit_code: process exit status for the CLI (2 for usage/config errors, 1 otherwise).
    """

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class ConfigError(CostctlError):
    """A bad configuration value, unknown key or unreadable config file (exit status 2)."""

    exit_code = 2


class UsageError(CostctlError):
    """A bad command-line argument or combination (exit status 2)."""

    exit_code = 2


class LedgerError(CostctlError):
    """The ledger database cannot be opened, migrated or written (exit status 1)."""


class ProviderError(CostctlError):
    """A provider call failed; the message is safe to show (secrets redacted)."""


class PolicyError(CostctlError):
    """A policy cannot be evaluated with the given configuration."""


class CurrencyMismatchError(CostctlError):
    """Two amounts in different currencies were combined without an exchange rate."""
