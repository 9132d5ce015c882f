"""costctl's command line (typer). One module per command group; :mod:`costctl.cli.main` wires them."""

import sys as _sys

# The language is chosen once, here, before any help text or click word is made (see
# costctl.cli.language); click and typer bind their own strings' translation function when they
# are imported: give them costctl's catalogue first (nothing changes for English; see costctl.i18n).
from ..i18n import install_for_cli as _install_for_cli
from .language import choose_for_cli as _choose_for_cli

_choose_for_cli(_sys.argv[1:])
_install_for_cli()
