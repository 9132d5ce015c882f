"""The fleet: every instance of every configured provider account, with the ledger's view.

* :mod:`.model` — the rows and the guard rule, pure functions (what ``costctl fleet`` shows
  and a policy sweep filters);
* :mod:`.collect` — reading the accounts (concurrently) and the ledger into a
  :class:`~costctl.fleet.model.FleetReport`.
"""
