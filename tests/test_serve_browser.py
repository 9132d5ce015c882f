"""``costctl serve``'s dashboard in a real browser: headless Chromium (Debian's ``chromium``,
installed by .ci/run) loads the page of a real ``costctl serve`` child over a populated ledger,
its DOM holds the spend charts and the runs table, and its screenshots (a desktop window and a
phone's width) are real pictures of them: the right size, not blank, the charts' first series
colour drawn.

A group of its own (``pytest -m browser``): Chromium takes seconds to start. Without Chromium the
test skips, or fails under CI=true (CI must run it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from helpers import costctl_env
from serve_support import populate, serve_child

pytestmark = pytest.mark.browser

#: The charts' first series colour (costctl.serve.charts.PALETTE[0]), as 0-1 RGB.
FIRST_SERIES = (0x4E / 255, 0x79 / 255, 0xA7 / 255)


def chromium() -> str:
    """The Chromium binary, or skip (fail under CI=true)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    reason = "Chromium is not installed (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true: the browser test must run", pytrace=False)
    pytest.skip(reason)


def run_chromium(binary: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Chromium headless, as root-in-a-container needs it (``--no-sandbox``), with a profile of
    its own under ``tmp_path``."""
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}", *args],
        env=env, capture_output=True, timeout=120, check=False)


class Dom(HTMLParser):
    """Ids of ``<svg class="spend-chart">`` with their ``<polyline>`` counts; rows of ``table#runs``."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, int] = {}
        self.run_rows = 0
        self._svg: str | None = None
        self._runs = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and "spend-chart" in a.get("class", "").split():
            self._svg = a.get("id", "")
            self.charts[self._svg] = 0
        elif tag == "polyline" and self._svg is not None:
            self.charts[self._svg] += 1
        elif tag == "table" and a.get("id") == "runs":
            self._runs = True
        elif tag == "tr" and self._runs:
            self.run_rows += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None
        elif tag == "table":
            self._runs = False


def check_screenshot(path: Path, width: int, height: int) -> None:
    """The PNG is ``width`` x ``height``, not blank (many colours, real contrast) and shows the
    charts' first series drawn as lines across them."""
    import numpy as np
    from matplotlib.image import imread

    assert path.is_file() and path.stat().st_size > 10_000, path
    pixels = imread(path)[..., :3]
    assert pixels.shape[:2] == (height, width)
    assert float(pixels.std()) > 0.05
    colours = np.unique((pixels * 255).round().astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50
    # The first series' lines cross the charts: their colour spans a third of the picture's columns
    # at least (the legend's 12-pixel swatches of that colour span a few dozen).
    near = np.all(np.abs(pixels - np.array(FIRST_SERIES)) < 0.06, axis=-1)
    assert int(np.count_nonzero(near.any(axis=0))) > width // 3, "the spend charts' lines are not in the screenshot"


def test_the_dashboard_in_headless_chromium(tmp_path):
    binary = chromium()
    url = f"sqlite:///{tmp_path / 'costctl.db'}"
    populate(url)
    env = costctl_env(tmp_path / "data", LANG="C")
    with serve_child("--port", "0", "--db", url, env=env) as (proc, base):
        dom = run_chromium(binary, tmp_path, "--dump-dom", f"{base}/")
        desktop, phone = tmp_path / "desktop.png", tmp_path / "phone.png"
        shot = run_chromium(binary, tmp_path, f"--screenshot={desktop}", "--window-size=1280,1400", f"{base}/")
        narrow = run_chromium(binary, tmp_path, f"--screenshot={phone}", "--window-size=390,1600", f"{base}/")
    assert proc.returncode == 0, proc.stderr_text
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    parsed = Dom()
    parsed.feed(dom.stdout.decode("utf-8"))
    assert parsed.charts == {"spend-by-instance-CNY": 1, "spend-by-instance-USD": 1, "spend-by-run-CNY": 1,
                             "spend-by-run-USD": 2}
    assert parsed.run_rows == 1 + 3  # the header row and the three runs
    assert shot.returncode == 0 and narrow.returncode == 0, shot.stderr.decode(errors="replace")[-2000:]
    check_screenshot(desktop, 1280, 1400)
    check_screenshot(phone, 390, 1600)
