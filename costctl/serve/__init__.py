"""``costctl serve``: the ledger as Prometheus metrics and a small web dashboard, in one process.

* :mod:`.source` — the ledger, opened read-only on first need (never created, never migrated);
* :mod:`.data` — what a scrape and a page read, through the ledger's own queries;
* :mod:`.metrics` — the ``prometheus_client`` collector (``/metrics``);
* :mod:`.charts` and :mod:`.dashboard` — the page (Jinja2 template, inline SVG, no script);
* :mod:`.redaction` — secrets masked in decisions' reasons, evidence and outcomes;
* :mod:`.app` — the WSGI application (routes, token, read-only methods, one-line errors);
* :mod:`.server` — the threaded ``wsgiref`` server and the rule for non-loopback binds.

The command itself is :mod:`costctl.cli.serve`; see ``docs/serve.md``.
"""
