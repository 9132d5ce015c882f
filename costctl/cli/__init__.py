"""costctl's command line (typer). One module per command group; :mod:`costctl.cli.main` wires them."""

# click and typer bind their own strings' translation function when they are imported: give them
# costctl's catalogue first (nothing changes for English; see costctl.i18n).
from ..i18n import install_for_cli as _install_for_cli

_install_for_cli()
