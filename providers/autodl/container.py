"""Inside an AutoDL container: who am I, and how do I power myself off.

An AutoDL container's hostname is ``autodl-container-<instance uuid>`` (what ``hostname``
prints in an AutoDL terminal), so costctl knows its own instance id without any API call.
Running the container's ``shutdown`` command powers the instance off and stops GPU billing
(AutoDL help, "实例内关机": ``shutdown`` in the terminal; ``/root/autodl-tmp`` survives).

``$AUTODL_CONTAINER_HOSTNAME``, when set, is taken as the container's hostname instead of the
kernel's: for costctl running where ``hostname`` prints something else than the AutoDL
container's name (a nested container, a wrapper, a test that simulates a container).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence

HOSTNAME_PREFIX = "autodl-container-"
_HOSTNAME_RE = re.compile(r"^autodl-container-([A-Za-z0-9][A-Za-z0-9-]*)$")

HostnameFn = Callable[[], str]
CommandRunner = Callable[[Sequence[str]], int]


def instance_id_from_hostname(hostname: str | None) -> str | None:
    """``autodl-container-<uuid>`` -> ``<uuid>``; anything else -> None.

    >>> instance_id_from_hostname("autodl-container-7c8a11a4a1-3e0b7d2c")
    '7c8a11a4a1-3e0b7d2c'
    """
    if not hostname:
        return None
    match = _HOSTNAME_RE.match(hostname.strip().split(".", 1)[0])
    return match.group(1) if match else None


def run_command(argv: Sequence[str]) -> int:
    """Run ``argv`` (no shell), wait at most 60 s, and return its exit status.

    Raises:
        OSError: the command does not exist or cannot be run.
        subprocess.TimeoutExpired: it did not finish within 60 s.
    """
    return subprocess.run(list(argv), check=False, timeout=60).returncode


#: Overrides the hostname the container is recognised by (see the module docstring).
HOSTNAME_ENV = "AUTODL_CONTAINER_HOSTNAME"


def default_hostname(env: Mapping[str, str] | None = None) -> str:
    """This machine's hostname: ``$AUTODL_CONTAINER_HOSTNAME`` in ``env`` (default
    ``os.environ``) when set, else ``socket.gethostname()``."""
    override = (os.environ if env is None else env).get(HOSTNAME_ENV)
    return override or socket.gethostname()
