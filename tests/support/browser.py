"""Pages rendered by a real browser: Debian's ``chromium``, headless.

CI installs it (``.ci/run``); elsewhere the tests that need it are skipped when it is absent
(``apt-get install chromium``), and fail under ``CI=true``."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

from support.requires import missing


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    missing("chromium", "apt-get install chromium; .ci/run installs it")
    raise AssertionError("not reached")


def _run(*args: str) -> str:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def render(page: Path, screenshot: Path, size: tuple[int, int] = (1100, 3200)) -> Page:
    """The page's DOM as the browser built it, and a screenshot of it."""
    url = page.resolve().as_uri()
    _run(f"--window-size={size[0]},{size[1]}", f"--screenshot={screenshot}", url)
    assert screenshot.exists(), f"no screenshot of {url}"
    return Page(_run("--dump-dom", url))


class Page(HTMLParser):
    """What the tests read off a rendered page: the text of each element with an ``id``, and
    the ``data-value`` of every mark (``rect``, ``circle``) inside each chart, by class."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.dom = dom
        self.text: dict[str, str] = {}
        self.marks: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self._open: list[tuple[str, str | None]] = []
        self._chart: str | None = None
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and "chart" in (a.get("class") or ""):
            self._chart = a.get("id")
        if self._chart and tag in ("rect", "circle") and a.get("data-value") is not None:
            self.marks[self._chart][a.get("class") or ""].append(float(a["data-value"] or 0))
        self._open.append((tag, a.get("id")))
        if a.get("id"):
            self.text[a["id"]] = ""

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            t, _ = self._open.pop()
            if t == tag:
                break
        if tag == "svg":
            self._chart = None

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self.text[ident] += data

    def rows(self, table_id: str) -> list[list[str]]:
        """The cells of a table, row by row (header rows included)."""
        start = re.search(f"id=[\"']{re.escape(table_id)}[\"']", self.dom).start()  # type: ignore[union-attr]
        end = self.dom.index("</table>", start)
        cells = _Cells()
        cells.feed(self.dom[start:end])
        return cells.rows


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data


def colours(screenshot: Path) -> dict[str, int]:
    """Pixels of the screenshot per ``#rrggbb`` colour."""
    from PIL import Image

    with Image.open(screenshot) as im:
        found = im.convert("RGB").getcolors(maxcolors=1 << 24) or []
    return {"#{:02x}{:02x}{:02x}".format(*rgb): n for n, rgb in found}
