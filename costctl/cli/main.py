"""Entry point of the ``costctl`` console script.

Each command group lives in its own module exposing ``register(app)``. :func:`main` turns
costctl's own errors (:class:`~costctl.errors.CostctlError`) into one line on stderr and a
non-zero exit; an unexpected exception also gets one line, and its traceback goes to a log
file whose path that line names.
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
import traceback
from datetime import datetime, timezone

import typer

from ..errors import CostctlError
from ..i18n import _
from ..validation import escape_controls, shown_path
from .translated import ClickException, CostctlTyper, show_usage_error

COMMAND_MODULES = ("init", "watch", "bill", "db", "gpus", "instances", "fleet", "patrol", "analyze", "sim", "snooze",
                   "serve")

#: Which module defines each command, so a run imports only the module it needs (importing
#: SQLAlchemy, Alembic and the catalog for every command would cost a second at start-up).
COMMAND_OWNERS = {
    "init": "init", "watch": "watch", "bill": "bill", "db": "db", "gpus": "gpus",
    "recommend": "gpus", "instances": "instances", "start": "instances", "stop": "instances",
    "release": "instances", "offers": "instances", "fleet": "fleet", "patrol": "patrol", "analyze": "analyze",
    "sim": "sim", "snooze": "snooze", "serve": "serve",
}

app = CostctlTyper(
    name="costctl",
    help=_("Stop wasting money on rented GPUs: watch a job, autostop idle instances, cap budgets, report spend."),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)



def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("costctl")
        except PackageNotFoundError:  # an uninstalled checkout
            from .. import __version__ as shown
        typer.echo(_("costctl {version}").format(version=shown))
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help=_("Print costctl's version and exit."),
                                 callback=_print_version, is_eager=True),
) -> None:
    # the help text is the Typer's (translated); a docstring here would replace it
    pass


#: The command modules registered on :data:`app` so far (once each: :func:`main` may run many
#: times in one process, and typer rebuilds its command group from every registration).
_REGISTERED: set[str] = set()


def _register(argv: list[str]) -> None:
    """Register the command modules: only the one that owns the command in ``argv`` when it
    names one, else all of them (for ``--help`` and for typer's own error messages)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    owner = COMMAND_OWNERS.get(first) if first else None
    modules = (owner,) if owner else COMMAND_MODULES
    for name in modules:
        if name not in _REGISTERED:
            importlib.import_module(f"{__package__}.{name}").register(app)
            _REGISTERED.add(name)


#: errno values of a write to stdout that failed for a reason outside costctl: a full disk
#: (``> /dev/full``), a quota, a file too big, an I/O error, a reader that closed the pipe.
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EPIPE})


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's own flush at exit fails no more (Python's
    documented remedy for a closed pipe, ``signal`` docs "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _crash(exc: BaseException) -> int:
    """Report a bug: the traceback goes to a crash log in the data dir, one line to stderr.
    Never raises: when the crash log cannot be written (a data dir that cannot exist, a path
    too long, no space), the line says the error alone, without a traceback on the terminal."""
    detail = _detail(exc)
    try:
        from ..paths import crash_log_dir

        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = crash_log_dir() / f"crash-{stamp}.log"
        path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8", errors="backslashreplace")
        line = _("costctl: internal error: {error}: {detail} (traceback in {path})").format(
            error=type(exc).__name__, detail=detail, path=shown_path(path))
    except Exception:  # noqa: BLE001 - the crash reporter itself must never raise
        line = _("costctl: internal error: {error}: {detail}").format(error=type(exc).__name__, detail=detail)
    try:
        print(escape_controls(shown_path(line)), file=sys.stderr)
    except Exception:  # noqa: BLE001 - stderr gone: the exit status still says it
        pass
    return 70


def _detail(exc: BaseException) -> str:
    """``str(exc)``, whatever ``__str__`` does (an exception's own text may fail to render)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return repr(type(exc))


#: errno values of a path the user gave that is wrong as given (exit 2, a usage error); any
#: other error on a named path is a run-time I/O failure (exit 1).
PATH_USAGE_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP,
                               errno.EINVAL, errno.EILSEQ})


def _path_error(exc: OSError) -> int:
    """An OSError on a named path (one the user gave, or one below the data dir it gave): one
    line naming the path, escaped, and the system's reason; exit 2 for a path that is wrong as
    given (:data:`PATH_USAGE_ERRNOS`), 1 for other I/O failures."""
    line = _("costctl: {path}: {reason}").format(path=shown_path(exc.filename), reason=exc.strerror or exc)
    print(escape_controls(line), file=sys.stderr)
    return 2 if exc.errno in PATH_USAGE_ERRNOS else 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a script, exits with) the process exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _register(args)
        try:
            # not standalone: a usage error comes back here to be printed in the user's language
            result = app(args=args, prog_name="costctl", standalone_mode=False)
        finally:
            sys.stdout.flush()  # a full disk or a closed pipe under stdout is seen here, not at exit
        # typer.Exit(code) comes back as its code; a command's own return value means success
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except ClickException as exc:
        return show_usage_error(exc)
    except typer.Abort:
        print(_("Aborted!"), file=sys.stderr)
        return 1
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except OSError as exc:
        if exc.filename is not None:
            return _path_error(exc)
        if exc.errno not in OUTPUT_ERRNOS:
            return _crash(exc)
        _discard_stdout()
        if exc.errno != errno.EPIPE:  # a reader that went away (`| head`) wants no message
            print(_("costctl: cannot write the output: {reason} (errno {errno})").format(
                reason=exc.strerror, errno=exc.errno), file=sys.stderr)
        return 1
    except CostctlError as exc:
        # one line, as typed: a control character in a path or value is shown escaped
        print(escape_controls(shown_path(_("costctl: {message}").format(message=exc.message))), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(_("costctl: interrupted"), file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that catches everything
        return _crash(exc)
    return 0


def run() -> None:  # pragma: no cover - console script shim
    """Console-script entry: exit with :func:`main`'s status."""
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
