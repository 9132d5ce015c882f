"""costctl's command line (typer). One module per command group; :mod:`costctl.cli.main` wires them."""
