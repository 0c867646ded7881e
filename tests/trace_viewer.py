"""An offline trace viewer for the trace export's browser test: the Catapult trace viewer in Chromium.

Perfetto's UI is a web app whose static files no package ships, and Chromium 156 no longer serves
``chrome://tracing`` (its internal debugging pages are off by default; turned on, the page fails to
load). The viewer ``chrome://tracing`` was, Catapult's ``trace_viewer_full.html``, ships inside
PyTorch's TensorBoard plugin wheel (``scripts/bootstrap --test`` takes that one file into
``.venv/trace-viewer``). It is written for Web Components v0, which Chromium removed: Debian's Custom
Elements v0 polyfill and three lines of shims (``document._currentScript``, ``createShadowRoot`` and
Polymer's shady DOM) make it run. The test then imports a trace into the viewer's own model
(``tr.Model``), draws it in ``tr-ui-timeline-view`` and reads back the track groups it drew.
"""

from __future__ import annotations

import functools
import http.server
import socketserver
import threading
from pathlib import Path

VIEWER = Path(__file__).resolve().parents[1] / ".venv" / "trace-viewer" / "trace_viewer_full.html"
POLYFILL = Path("/usr/lib/javascript/webcomponentsjs-custom-element-v0/CustomElements.js")
SHIMS = ('<script>Object.defineProperty(document, "_currentScript", {get() { return document.currentScript; }});'
         'Element.prototype.createShadowRoot = function () { try { return this.attachShadow({mode: "open"}); }'
         ' catch (e) { return this; } };'
         'window.Polymer = {dom: "shady"}; window.__hideTraceViewerPolyfillWarning = true;</script>'
         '<script src="CustomElements.js"></script>')

#: imports a trace text into the viewer, draws it, and says what it drew
LOAD = """async (text) => {
  const model = new tr.Model();
  new tr.importer.Import(model).importTraces([text]);
  const view = document.createElement('tr-ui-timeline-view');
  const box = document.createElement('track-view-container');
  box.id = 'track_view_container';
  view.track_view_container = box;
  Polymer.dom(view).appendChild(box);
  view.globalMode = true;
  view.style.height = '700px';
  Polymer.dom(document.body).appendChild(view);
  view.model = model;
  await new Promise(r => setTimeout(r, 500));
  return {
    processes: model.getAllProcesses().map(p => ({pid: p.pid, name: p.name, threads: Object.values(p.threads).map(t => t.name),
                                                  counters: Object.values(p.counters).map(c => c.name),
                                                  slices: Object.values(p.threads).reduce((n, t) => n + t.sliceGroup.length, 0)})),
    drawn: document.body.innerText,
    errors: model.importWarnings.map(w => w.message),
  };
}"""


def missing() -> str | None:
    """Why the viewer cannot run here, or None."""
    if not VIEWER.is_file():
        return f"{VIEWER} is absent (scripts/bootstrap --test takes it from the torch-tb-profiler wheel)"
    if not POLYFILL.is_file():
        return f"{POLYFILL} is absent (apt-get install libjs-webcomponentsjs-custom-element-v0)"
    return None


class ViewerServer:
    """The viewer page and its polyfill served from a folder on 127.0.0.1 (a context manager)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        html = VIEWER.read_text()
        at = html.index(">", html.index("<head")) + 1
        (folder / "viewer.html").write_text(html[:at] + SHIMS + html[at:])
        (folder / "CustomElements.js").write_bytes(POLYFILL.read_bytes())
        handler = functools.partial(_Quiet, directory=str(folder))
        self.httpd = socketserver.TCPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/viewer.html"

    def __enter__(self) -> "ViewerServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass
