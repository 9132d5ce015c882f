#!/usr/bin/env bash
# Maintain costctl's message catalogues with Babel (docs/i18n.md):
#   tools/i18n.sh extract   -> costctl/locale/costctl.pot from the sources (keywords _, N_, ngettext)
#   tools/i18n.sh update    -> merge the template into every .po (new entries untranslated)
#   tools/i18n.sh compile   -> compile every .po into its .mo (committed; tests/test_i18n_catalog.py checks it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
case "${1:-}" in
  extract) "$PY" -m babel.messages.frontend extract -F babel.cfg -k _ -k N_ -k ngettext:1,2 \
             --no-location --sort-output --project costctl --copyright-holder "costctl" \
             -o costctl/locale/costctl.pot . ;;
  update)  "$PY" -m babel.messages.frontend update -i costctl/locale/costctl.pot -d costctl/locale -D costctl \
             --no-fuzzy-matching --ignore-obsolete ;;
  compile) "$PY" -m babel.messages.frontend compile -d costctl/locale -D costctl --statistics ;;
  *) echo "usage: tools/i18n.sh extract|update|compile" >&2; exit 2 ;;
esac
