"""The web view in a real browser: headless Chromium driven over the DevTools protocol loads every page of a
small collection served by uvicorn, checks the drawn chunk boundaries against the stored offsets, runs a
search from the page, and saves screenshots (CHUNKYARD_UI_SCREENSHOTS, default: the test's tmp_path)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.ingest import run_ingest
from pipeline.ui import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (apt-get install chromium)"),
]

#: What the document page draws, read in the browser: per chunk id, its first start, last end and the text
#: of its segments joined (a chunk is the run of segments that carry its id).
DRAWN_JS = """(() => { const out = {};
  for (const s of document.querySelectorAll('#text .seg')) {
    for (const id of s.dataset.chunks.split(' ').filter(Boolean)) {
      const c = out[id] || (out[id] = {start: +s.dataset.start, end: +s.dataset.start, text: ''});
      if (c.end !== +s.dataset.start) c.broken = true;
      c.end = +s.dataset.end; c.text += s.textContent; } }
  return JSON.stringify(out); })()"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevTools:
    """One page of a headless Chromium, over its DevTools websocket (websockets' sync client)."""

    def __init__(self, ws_url: str) -> None:
        from websockets.sync.client import connect

        self.ws, self.n = connect(ws_url, max_size=64 * 2**20), 0

    def call(self, method: str, **params: object) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expr: str) -> object:
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return res["result"].get("value")

    def wait_loaded(self, part: str) -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if self.eval("document.readyState") == "complete" and part in (self.eval("location.href") or ""):
                assert self.eval("window.__err || ''") == "", f"script error on {part}"
                return
            time.sleep(0.05)
        raise TimeoutError(f"page {part} did not load")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_loaded(url)

    def shot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


@pytest.fixture
def served(tmp_path, settings, database_url):
    """uvicorn serving the view of an ingested collection on a free localhost port, in a thread."""
    import uvicorn

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(
        "# Guide\n\nIntro text about the service and how it is run.\n\n## Keys\n\n"
        + "Rotating the API keys every quarter keeps the service safe. " * 30
        + "\n\n## Bees\n\nHoney bee colonies raise a new queen when the old one fails.\n",
        encoding="utf-8",
    )
    (docs / "notes.txt").write_text("Plain notes. The service restarts at night.\n", encoding="utf-8")
    run_ingest([docs], settings=settings, collection="demo")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(database_url, settings=settings), host="127.0.0.1",
                                           port=port, log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 15
    while not server.started and time.monotonic() < end:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port_file = profile / "DevToolsActivePort"
        end = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > end or proc.poll() is not None:
                pytest.skip("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        dt = DevTools(page["webSocketDebuggerUrl"])
        dt.call("Page.enable")
        # a script error on any page is kept, and asserted absent at the end
        dt.call("Page.addScriptToEvaluateOnNewDocument",
                source="window.addEventListener('error', e => { window.__err = String(e.message); })")
        dt.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        yield dt
        dt.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_every_page_in_a_real_browser(served, browser, conn, tmp_path):
    shots = Path(os.environ.get("CHUNKYARD_UI_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%guide.md'").fetchone()[0]
    rows = conn.execute("SELECT id, char_start, char_end, text FROM chunks WHERE document_id = %s", (doc,)).fetchall()
    assert len(rows) >= 2

    browser.goto(f"{served}/")
    assert "demo" in browser.eval("document.body.innerText")
    browser.shot(shots / "collections.png")

    browser.goto(f"{served}/c/demo")
    assert browser.eval("document.querySelectorAll('svg.plot').length") >= 1
    browser.shot(shots / "collection.png")

    browser.goto(f"{served}/d/{doc}")
    seen = {int(k): v for k, v in json.loads(browser.eval(DRAWN_JS)).items()}
    assert set(seen) == {r[0] for r in rows}
    for cid, s, e, text in rows:
        assert not seen[cid].get("broken")
        assert (seen[cid]["start"], seen[cid]["end"], seen[cid]["text"]) == (s, e, text)
    # boundaries are visible: every chunk's first segment carries the bar, neighbours alternate colours
    assert browser.eval("document.querySelectorAll('#text .seg.b').length") == len(rows)
    assert browser.eval("document.querySelectorAll('#text .seg.c0').length") >= 1
    assert browser.eval("document.querySelectorAll('#text .seg.c1').length") >= 1
    # clicking a chunk shows its id, tokens and hash in the panel
    second = sorted(rows, key=lambda r: r[1])[1][0]
    browser.eval(f"document.querySelector('#text .seg[data-chunks~=\"{second}\"]').click()")
    panel = browser.eval("document.getElementById('panel').innerText")
    assert f"Chunk {second}" in panel and "tokens" in panel and "content hash" in panel
    browser.shot(shots / "document.png")

    browser.goto(f"{served}/c/demo/search")
    browser.eval("document.getElementById('q').value = 'rotating keys'; "
                 "document.querySelector('select[name=mode]').value = 'fulltext'; "
                 "document.getElementById('search').submit()")  # fmt: skip
    browser.wait_loaded("q=rotating")
    assert browser.eval("document.querySelectorAll('li.hit').length") >= 1
    assert "Rotating" in browser.eval("document.querySelector('li.hit mark').innerText")
    browser.shot(shots / "search.png")

    # from a hit to its document, the span highlighted
    browser.eval("document.querySelector('li.hit a').click()")
    browser.wait_loaded("hl=")
    assert browser.eval("document.querySelectorAll('#text .seg.hl').length") >= 1
    browser.shot(shots / "document-hit.png")

    run = conn.execute("SELECT max(id) FROM runs").fetchone()[0]
    browser.goto(f"{served}/r/{run}")
    assert "Counts" in browser.eval("document.body.innerText")
    browser.shot(shots / "run.png")

    assert browser.eval("window.__err || ''") == ""
    browser.goto(f"{served}/d/999999")
    assert "404" in browser.eval("document.body.innerText")
    assert all((shots / n).stat().st_size > 1000 for n in ("collections.png", "document.png", "search.png"))
