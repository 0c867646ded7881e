// rankmap dashboard: what both pages use. The API client (with the bearer token of a server
// reachable from other machines), the formatting of bytes, times and counts, element builders
// and plotly's defaults. An ES module: app.js and machine.js import what they use from it.

const TOKEN_KEY = "rankmap.token";
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

export const $ = (id) => document.getElementById(id);

// The token of a server reachable from other machines comes in the URL's #token= part (never sent
// to the server); it is kept for this tab only and dropped from the address bar. True when one came.
export function takeTokenFromHash() {
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!m) return false;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  let rest = location.hash.replace(/(^#|&)token=[^&]*/, "$1").replace(/^#&/, "#").replace(/&$/, "");
  if (rest === "#") rest = "";
  history.replaceState(null, "", location.pathname + location.search + rest);
  return true;
}

// The token typed into the page's form, kept like one from the address bar.
export function saveToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const r = await fetch(path, { cache: "no-store", headers });
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (r.status === 401) showAuth(token ? "The token given was not accepted." : null);
  if (r.status === 429) showAuth(`${(body && body.detail) || "Too many wrong tokens"}.`);
  if (!r.ok) {
    const err = new Error((body && body.detail) || `${r.status} ${r.statusText}`);
    err.status = r.status;
    err.body = body;  // what else the refusal says (a mapping's owner_job, say)
    throw err;
  }
  return body;
}

// A 401 (or a 429: wrong tokens, wait): the page's token form (#auth), said once; `note` says why
function showAuth(note) {
  const box = $("auth");
  if (!box.hidden) return;
  box.hidden = false;
  $("auth-note").textContent = note ||
    "This dashboard is reachable from other machines, so it needs the token that `rankmap serve` printed.";
  $("auth-token").focus();
}

export function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "kB", "MB", "GB", "TB", "PB"];
  let i = 0, v = Number(b);
  while (Math.abs(v) >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return `${i ? v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) : v} ${u[i]}`;
}
export function fmtCount(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
export function fmtNs(ns) {
  if (ns === null || ns === undefined) return "–";
  const s = ns / 1e9;
  if (s >= 60) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s >= 1) return `${s.toFixed(2)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
  return `${(s * 1e6).toFixed(1)} µs`;
}
export function fmtSeconds(s) { return s ? fmtNs(s * 1e9) : "0"; }
export function fmtPct(x) { return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)} %`; }
// "1 rank", "2 ranks", "1,024 ranks": a count with its noun, singular for exactly one
export function count(n, word) { return `${fmtCount(n)} ${word}${Number(n) === 1 ? "" : "s"}`; }
export function fmtUtil(u) { return u >= 10 ? `${u.toFixed(0)} %` : u >= 0.1 ? `${u.toFixed(1)} %` : u > 0 ? "< 0.1 %" : "0 %"; }
export function ago(iso) {
  if (!iso) return "";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}
export function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

export function plotLayout(extra) {
  return Object.assign({
    margin: { l: 60, r: 20, t: 10, b: 50 }, font: { family: "system-ui, sans-serif", size: 12 },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", legend: { orientation: "h", y: 1.12 },
  }, extra);
}

// A message where a chart would stand; the box shrinks to the message (class "message"), so a card
// without data is not a tall empty frame.
export function showPlotError(elId, msg) {
  const e = $(elId);
  if (window.Plotly) Plotly.purge(e);
  e.textContent = "";
  e.classList.add("message");
  if (msg) e.append(el("p", { class: "muted" }, msg));
}

// Draw a chart where a message may stand (showPlotError): the message goes, or it would stay
// under the chart of the next job that has data ("No operations recorded." under its bars).
export function plot(elId, traces, layout) {
  const e = $(elId);
  for (const m of e.querySelectorAll(":scope > p.muted")) m.remove();
  e.classList.remove("message");
  // A chart that was hidden when the window changed size (the link counters of a job without any)
  // keeps its old width when shown again, wider than its card: fit it to its box.
  return Plotly.react(e, traces, layout, PLOT_CONFIG).then(() => {
    if (e.offsetWidth && e._fullLayout && Math.abs(e._fullLayout.width - e.offsetWidth) > 1) return Plotly.Plots.resize(e);
  });
}
