"""The schema check without Alembic: head detection from the version files, the database's
revision from its alembic_version table; Alembic is imported only when a migration runs."""

from __future__ import annotations

import shutil
import subprocess
import sys

from alembic.config import Config
from alembic.script import ScriptDirectory

from costctl.ledger import migrate


def test_head_from_the_version_files_equals_alembics_own():
    cfg = Config()
    cfg.set_main_option("script_location", migrate.script_location())
    assert migrate.head_revision() == ScriptDirectory.from_config(cfg).get_current_head()


def test_a_newer_version_file_is_the_new_head(tmp_path):
    versions = tmp_path / "versions"
    shutil.copytree(migrate.script_location() + "/versions", versions)
    head = migrate.head_revision(versions)
    (versions / "9999_newer.py").write_text(
        f'"""newer"""\nrevision: str = "9999"\ndown_revision: str | None = "{head}"\n')
    assert migrate.head_revision(versions) == "9999"
    assert migrate.script_revisions(versions)["9999"] == head


def test_opening_a_ledger_at_head_imports_no_alembic(tmp_path):
    url = f"sqlite:///{tmp_path / 'l.db'}"
    from costctl.ledger.db import Ledger
    Ledger.open(url).close()  # created and migrated here (Alembic runs)
    code = (
        "import sys\n"
        "from costctl.ledger.db import Ledger\n"
        f"l = Ledger.open({url!r})\n"
        "assert l.revision() is not None\n"
        "l.close()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako', 'pygments'))\n"
        "print(bad)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout


def test_the_watch_path_imports_no_alembic_mako_or_pygments():
    code = (
        "import sys\n"
        "import costctl.watch.watcher\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako', 'pygments'))\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
