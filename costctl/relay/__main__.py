"""``python -m costctl.relay``: the relay process (started by ``costctl watch``)."""

import sys

from .server import main

sys.exit(main())
