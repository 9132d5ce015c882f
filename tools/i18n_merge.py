"""Merge translations into a catalogue: ``python tools/i18n_merge.py zh_CN FILE.json...``.

Each JSON file maps an English message id to its translation (a plural entry: the singular id
to a list of forms). Entries of the catalogue not in the template are left alone; an id that the
catalogue does not hold (run ``tools/i18n.sh extract`` and ``update`` first) is reported and
skipped. The catalogue is rewritten with Babel (sorted, no line numbers); compile it after with
``tools/i18n.sh compile``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from babel.messages.pofile import read_po, write_po

LOCALE = Path(__file__).resolve().parent.parent / "costctl" / "locale"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    lang, files = argv[0], argv[1:]
    po_path = LOCALE / lang / "LC_MESSAGES" / "costctl.po"
    with po_path.open("rb") as f:
        catalog = read_po(f, locale=lang)
    missing = 0
    for name in files:
        for msgid, text in json.loads(Path(name).read_text(encoding="utf-8")).items():
            message = catalog.get(msgid)
            if message is None:
                missing += 1
                print(f"not in the catalogue (extract/update first): {msgid!r}", file=sys.stderr)
                continue
            message.string = tuple(text) if isinstance(text, list) else text
            message.flags.discard("fuzzy")
    with po_path.open("wb") as f:
        write_po(f, catalog, width=100, sort_output=True, omit_header=False, include_lineno=False)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
