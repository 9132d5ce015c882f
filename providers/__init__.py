"""Provider adapters for costctl, installed as ``costctl_providers``.

One interface (:class:`costctl_providers.base.Provider`), normalized records
(:class:`~costctl_providers.base.Instance`, :class:`~costctl_providers.base.Offer`), one
status enum, and a registry that finds adapters by name (entry points in the
``costctl.providers`` group, plus the modules shipped here). This package never imports
costctl's ledger, config or CLI.
"""
