// rankmap dashboard: one page over the JSON API of `rankmap serve`. No build step.
// Every view is drawn from one endpoint; while a job runs the page polls every 2 s.
"use strict";

const POLL_MS = 2000;
const JOBS_POLL_MS = 5000;
const CLASS_COLOURS = { p2p: "#2563eb", collective: "#f59e0b", rma: "#10b981", nccl: "#8b5cf6" };
const MEM_COLOURS = { device: "#76b900", host: "#2563eb", managed: "#8b5cf6", unknown: "#9ca3af" };
const KIND_STYLE = {
  gpu: { fill: "#ecf7e2", stroke: "#4d8f1c", w: 62, h: 30 },
  nvswitch: { fill: "#ede9fe", stroke: "#6d28d9", w: 76, h: 30 },
  pcie_switch: { fill: "#e0f2fe", stroke: "#0369a1", w: 66, h: 26 },
  host_bridge: { fill: "#f1f5f9", stroke: "#64748b", w: 58, h: 24 },
  cpu: { fill: "#fef3c7", stroke: "#b45309", w: 70, h: 32 },
  nic: { fill: "#fce7f3", stroke: "#be185d", w: 62, h: 26 },
  node: { fill: "#f1f5f9", stroke: "#334155", w: 70, h: 30 },
};
const LINK_DASH = { nvlink: "", pcie: "6 4", cpu_interconnect: "2 4", network: "10 4 2 4" };
const IDLE_LINK = "#c3cbd5";
const HEAT = ["#fde68a", "#f59e0b", "#ea580c", "#b91c1c"];
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const SVGNS = "http://www.w3.org/2000/svg";

const state = { info: null, jobId: null, jobTimer: null, jobsTimer: null, seq: 0, spec: null, running: false };

// ------------------------------------------------------------------ helpers
const $ = (id) => document.getElementById(id);

async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) {
    const err = new Error((body && body.detail) || `${r.status} ${r.statusText}`);
    err.status = r.status;
    throw err;
  }
  return body;
}

function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "kB", "MB", "GB", "TB", "PB"];
  let i = 0, v = Number(b);
  while (Math.abs(v) >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return `${i ? v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) : v} ${u[i]}`;
}
function fmtCount(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function fmtNs(ns) {
  if (ns === null || ns === undefined) return "–";
  const s = ns / 1e9;
  if (s >= 60) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s >= 1) return `${s.toFixed(2)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
  return `${(s * 1e6).toFixed(1)} µs`;
}
function fmtSeconds(s) { return s ? fmtNs(s * 1e9) : "0"; }
function fmtPct(x) { return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)} %`; }
function ago(iso) {
  if (!iso) return "";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}
function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
function statusPill(job) {
  if (job.exit_status === null || job.exit_status === undefined) return el("span", { class: "pill run" }, "running");
  if (job.exit_status === 0) return el("span", { class: "pill ok" }, "exit 0");
  return el("span", { class: "pill bad" }, `exit ${job.exit_status}`);
}
function heat(u) {  // 0..1 -> colour along HEAT
  u = Math.max(0, Math.min(1, u));
  const x = u * (HEAT.length - 1), i = Math.min(Math.floor(x), HEAT.length - 2), f = x - i;
  const a = HEAT[i], b = HEAT[i + 1];
  const c = (k) => Math.round(parseInt(a.substr(k, 2), 16) * (1 - f) + parseInt(b.substr(k, 2), 16) * f);
  return "#" + [1, 3, 5].map((k) => c(k).toString(16).padStart(2, "0")).join("");
}
function plotLayout(extra) {
  return Object.assign({
    margin: { l: 60, r: 20, t: 10, b: 50 }, font: { family: "system-ui, sans-serif", size: 12 },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", legend: { orientation: "h", y: 1.12 },
  }, extra);
}

// ------------------------------------------------------------------ jobs
async function loadJobs() {
  let data;
  try { data = await api("/api/jobs"); } catch (e) { return; }
  const list = $("job-list");
  list.textContent = "";
  $("jobs-count").textContent = data.jobs.length ? `(${data.jobs.length})` : "";
  $("jobs-empty").hidden = data.jobs.length > 0;
  for (const j of data.jobs) {
    const li = el("li", { "data-job": j.id });
    if (j.id === state.jobId) li.classList.add("selected");
    const line = el("div", { class: "job-line" });
    line.append(el("span", { class: "job-id" }, `#${j.id}`), statusPill(j));
    li.append(line, el("div", { class: "job-cmd", title: j.command }, j.command));
    const ranks = j.world_size ?? j.ranks_reporting;
    li.append(el("div", { class: "job-meta" },
      [ranks ? `${ranks} ranks` : null, fmtBytes(j.bytes), j.launcher, ago(j.created)].filter(Boolean).join(" · ")));
    li.addEventListener("click", () => selectJob(j.id));
    list.append(li);
  }
  clearTimeout(state.jobsTimer);
  state.jobsTimer = setTimeout(loadJobs, JOBS_POLL_MS);
}

function selectJob(id) {
  if (String(id) !== String(state.jobId)) history.replaceState(null, "", `#/job/${id}`);
  state.jobId = Number(id);
  state.running = false;
  for (const li of document.querySelectorAll("#job-list li"))
    li.classList.toggle("selected", li.dataset.job === String(id));
  $("no-job").hidden = true;
  $("job").hidden = false;
  refreshJob(true);
}

// ------------------------------------------------------------------ one job
async function refreshJob(first) {
  clearTimeout(state.jobTimer);
  const id = state.jobId, seq = ++state.seq;
  const q = (p) => api(`/api/jobs/${id}${p}`);
  const cls = $("matrix-class").value, what = $("matrix-what").value;
  let job;
  try {
    job = await q("");
  } catch (e) {
    if (seq !== state.seq) return;
    $("job-error").hidden = false;
    $("job-error").textContent = e.message;
    // a running job whose store is briefly busy keeps being polled; an unknown job does not
    if (state.running && e.status !== 404) state.jobTimer = setTimeout(() => refreshJob(false), POLL_MS);
    return;
  }
  if (seq !== state.seq) return;  // another job was picked meanwhile
  $("job-error").hidden = true;
  renderHeader(job);
  const spec = encodeURIComponent(state.spec || "");
  const parts = await Promise.allSettled([
    q(`/matrix?class=${encodeURIComponent(cls)}&what=${what}`),
    q("/ops"), q("/timeline"), q("/links"),
    api(`/api/topology?job=${id}${spec ? `&spec=${spec}` : ""}`),
    q(`/mapping${spec ? `?spec=${spec}` : ""}`),
  ]);
  if (seq !== state.seq) return;
  const [matrix, ops, timeline, links, topo, mapping] = parts;
  const guard = (fn, p, elId) => {
    try {
      if (p.status === "fulfilled") fn(p.value);
      else showPlotError(elId, p.reason.message);
    } catch (e) { showPlotError(elId, String(e)); console.error(e); }
  };
  guard((m) => renderMatrix(m, first), matrix, "heatmap");
  guard(renderOps, ops, "ops");
  guard(renderTimeline, timeline, "timeline");
  guard(renderLinks, links, "links");
  guard(renderMem, { status: "fulfilled", value: job }, "mem");
  renderTopology(topo);
  renderMapping(mapping);
  state.running = job.running;
  if (job.running) state.jobTimer = setTimeout(() => refreshJob(false), POLL_MS);
}

function showPlotError(elId, msg) {
  const e = $(elId);
  if (window.Plotly) Plotly.purge(e);
  e.textContent = "";
  e.append(el("p", { class: "muted" }, msg));
}

function kpi(k, v, hint) {
  const d = el("div", { class: "kpi" });
  d.append(el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  if (hint) d.append(el("div", { class: "h" }, hint));
  return d;
}

function renderHeader(data) {
  const j = data.job, s = data.summary;
  $("job-title").textContent = `Job #${j.id}`;
  $("job-command").textContent = j.command;
  $("job-when").textContent = [`started ${j.created ? new Date(j.created).toLocaleString() : "?"}`,
    j.ended ? `ended ${new Date(j.ended).toLocaleString()}` : null, `launcher ${j.launcher}`,
    (j.hosts && j.hosts.length) ? `on ${j.hosts.join(", ")}` : null].filter(Boolean).join(" · ");
  const st = $("job-status");
  st.textContent = "";
  st.append(statusPill(j));
  const k = $("kpis");
  k.textContent = "";
  k.append(kpi("ranks", `${s.ranks_reporting} / ${s.world_size}`, "reporting / world size"));
  k.append(kpi("bytes sent", fmtBytes(s.total_bytes), `${fmtCount(s.total_messages)} messages`));
  k.append(kpi("elapsed", j.elapsed_ns ? fmtNs(j.elapsed_ns) : (data.running ? "running" : "–")));
  if (s.pop) {
    k.append(kpi("parallel efficiency", fmtPct(s.pop.parallel_efficiency), "load balance × comm. efficiency"));
    k.append(kpi("load balance", fmtPct(s.pop.load_balance)));
    k.append(kpi("comm. efficiency", fmtPct(s.pop.communication_efficiency)));
  }
  const classes = Object.entries(s.bytes_by_class).sort((a, b) => b[1].bytes - a[1].bytes);
  if (classes.length) k.append(kpi("top class", classes[0][0], fmtBytes(classes[0][1].bytes)));
  const pr = $("job-problems");
  const probs = s.problems || [];
  pr.hidden = probs.length === 0 && s.unfinished_ranks.length === 0;
  pr.textContent = [probs.length ? `${probs.length} problem(s): ${probs.slice(0, 3).join("; ")}` : "",
    (!data.running && s.unfinished_ranks.length) ? `ranks without a final flush: ${s.unfinished_ranks.slice(0, 16).join(", ")}` : ""]
    .filter(Boolean).join(" — ");
  // keep the class choices of the heatmap in step with what the job has
  const sel = $("matrix-class"), have = new Set([...sel.options].map((o) => o.value));
  for (const c of Object.keys(s.bytes_by_class)) if (!have.has(c)) sel.append(el("option", { value: c }, c));
}

function renderMatrix(m) {
  const n = m.world_size, ranks = [...Array(n).keys()];
  const unit = m.what === "bytes" ? "B" : " msgs";
  const trace = {
    type: "heatmap", z: m.matrix, x: ranks, y: ranks, xgap: n <= 64 ? 1 : 0, ygap: n <= 64 ? 1 : 0,
    colorscale: [[0, "#ffffff"], [1e-9, "#eef4fb"], [0.2, "#c6dbef"], [0.45, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
    hovertemplate: `rank %{y} → rank %{x}<br>%{z:,}${unit}<extra></extra>`,
    colorbar: { title: { text: m.what, side: "right" }, thickness: 12 },
  };
  const layout = plotLayout({
    xaxis: { title: { text: "receiver (dst rank)" }, dtick: n <= 16 ? 1 : undefined, constrain: "domain" },
    yaxis: { title: { text: "sender (src rank)" }, autorange: "reversed", dtick: n <= 16 ? 1 : undefined, scaleanchor: "x" },
  });
  Plotly.react("heatmap", [trace], layout, PLOT_CONFIG);
}

function renderOps(data) {
  const ops = data.operations;
  if (!ops.length) return showPlotError("ops", "No operations recorded.");
  const names = ops.map((o) => o.operation);
  const hover = ops.map((o) => `${o.operation} (${o.class || "no pair bytes"})<br>${fmtBytes(o.bytes)} in ${fmtCount(o.messages)} messages` +
    `<br>${fmtCount(o.calls)} calls, ${fmtNs(o.time_ns)} summed over ${o.ranks} ranks`);
  const traces = [
    { type: "bar", name: "bytes", x: names, y: ops.map((o) => o.bytes), offsetgroup: 1,
      marker: { color: ops.map((o) => CLASS_COLOURS[o.class] || "#64748b") }, hovertext: hover, hoverinfo: "text" },
    { type: "bar", name: "time in call (s)", x: names, y: ops.map((o) => o.time_ns / 1e9), yaxis: "y2", offsetgroup: 2,
      marker: { color: "rgba(100,116,139,.45)" }, hovertext: hover, hoverinfo: "text" },
  ];
  Plotly.react("ops", traces, plotLayout({
    barmode: "group", margin: { l: 60, r: 60, t: 10, b: 90 },
    yaxis: { title: { text: "bytes" }, tickformat: ".2s" },
    yaxis2: { title: { text: "seconds (all ranks)" }, overlaying: "y", side: "right", showgrid: false, rangemode: "tozero" },
    xaxis: { tickangle: -30 },
  }), PLOT_CONFIG);
}

function renderTimeline(data) {
  const classes = Object.keys(data.series);
  $("timeline-note").textContent = data.t_s.length
    ? `${data.bucket_ms} ms buckets${data.bucket_ms_assumed ? " (assumed)" : ""}` : "";
  if (!data.t_s.length) return showPlotError("timeline", "No timeline recorded.");
  const per = data.bucket_ms / 1000;
  const traces = classes.map((c) => ({
    type: "scatter", mode: "lines", stackgroup: "one", name: c, x: data.t_s,
    y: data.series[c].map((b) => b / per / 1e9), line: { width: 0.5, color: CLASS_COLOURS[c] },
    hovertemplate: `${c}: %{y:.3f} GB/s at %{x:.2f} s<extra></extra>`,
  }));
  Plotly.react("timeline", traces, plotLayout({
    xaxis: { title: { text: "seconds since start" } }, yaxis: { title: { text: "GB/s sent" }, rangemode: "tozero" },
  }), PLOT_CONFIG);
}

function renderMem(job) {
  const mem = job.summary.bytes_by_mem;
  const kinds = Object.keys(mem).sort((a, b) => mem[b] - mem[a]);
  if (!kinds.length) return showPlotError("mem", "No bytes recorded.");
  const total = kinds.reduce((s, k) => s + mem[k], 0);
  Plotly.react("mem", [{
    type: "bar", orientation: "h", y: kinds, x: kinds.map((k) => mem[k]),
    marker: { color: kinds.map((k) => MEM_COLOURS[k] || "#64748b") },
    text: kinds.map((k) => `${fmtBytes(mem[k])} (${(100 * mem[k] / (total || 1)).toFixed(1)} %)`),
    textposition: "auto", hovertemplate: "%{y}: %{x:,} B<extra></extra>",
  }], plotLayout({ margin: { l: 80, r: 20, t: 10, b: 40 }, xaxis: { title: { text: "bytes sent from" }, tickformat: ".2s" } }), PLOT_CONFIG);
}

function renderLinks(data) {
  const has = data.series.length > 0;
  $("links-empty").hidden = has;
  $("links").hidden = !has;
  if (!has) return;
  const traces = [];
  for (const s of data.series) {
    for (const dir of ["tx", "rx"]) {
      const y = s[`${dir}_gbps`];
      if (!y.some((v) => v !== null)) continue;
      traces.push({ type: "scatter", mode: "lines", name: `GPU${s.device} ${s.link} ${dir}`, x: s.t_s, y,
        line: { width: 1.5, dash: dir === "rx" ? "dot" : "solid" },
        hovertemplate: `GPU${s.device} ${s.link} ${dir}: %{y:.2f} GB/s at %{x:.2f} s<extra></extra>` });
    }
  }
  Plotly.react("links", traces, plotLayout({
    legend: { orientation: "v", x: 1.02, y: 1 }, margin: { l: 60, r: 10, t: 10, b: 45 },
    xaxis: { title: { text: "seconds since first sample" } }, yaxis: { title: { text: "GB/s" }, rangemode: "tozero" },
  }), PLOT_CONFIG);
}

// ------------------------------------------------------------------ topology drawing
function deviceLabel(d) {
  switch (d.kind) {
    case "gpu": return `GPU${d.index}`;
    case "cpu": return `CPU${d.index}`;
    case "nvswitch": return `NVSwitch${d.index}`;
    case "pcie_switch": return `PCIe sw${d.index}`;
    case "host_bridge": return `RC${d.index}`;
    case "nic": return (d.name || `NIC${d.index}`).slice(0, 10);
    default: return (d.name || d.id).slice(0, 10);
  }
}

function ranksLabel(rs) {
  if (!rs || !rs.length) return "";
  const shown = rs.slice(0, 4).map((r) => `r${r}`).join(" ");
  return rs.length > 4 ? `${shown} +${rs.length - 4}` : shown;
}

// Draw the topology into `box`; `load` (optional) colours links; `ref` is the congestion that maps
// to the hottest colour, shared by views that are compared.
function drawTopology(box, topo, load, ref) {
  const t = topo.topology, lay = topo.layout, P = lay.positions;
  const root = svg("svg", { viewBox: `0 0 ${lay.width} ${lay.height}`, class: "topology", role: "img",
    "aria-label": `topology ${t.name}` });
  const linksG = svg("g", { class: "links" }), devG = svg("g", { class: "devices" });
  const devs = Object.fromEntries(t.devices.map((d) => [d.id, d]));
  const loads = load ? load.links : null;
  t.links.forEach((l, i) => {
    const a = P[l.a], b = P[l.b];
    const ld = loads ? loads[i] : null;
    const bytes = ld ? ld.load_ab + ld.load_ba : 0;
    const cong = ld ? Math.max(ld.congestion_ab, ld.congestion_ba) : 0;
    const use = ref > 0 ? cong / ref : 0;
    const colour = bytes > 0 ? heat(use) : IDLE_LINK;
    let d;
    if (a.row === b.row) {  // links within a layer (GPU-GPU NVLink) arc below it
      const mx = (a.x + b.x) / 2, dy = 26 + 0.16 * Math.abs(a.x - b.x);
      d = `M${a.x},${a.y} Q${mx},${a.y + dy} ${b.x},${b.y}`;
    } else {
      d = `M${a.x},${a.y} L${b.x},${b.y}`;
    }
    const p = svg("path", {
      d, class: "link", "data-link": i, "data-kind": l.kind, "data-load": bytes, "data-use": use.toFixed(4),
      stroke: colour, "stroke-width": (bytes > 0 ? 2.5 + 8 * use : 1.5).toFixed(2),
      "stroke-dasharray": LINK_DASH[l.kind] || "", "stroke-opacity": bytes > 0 ? 0.95 : 0.8,
    });
    const name = `${l.a} ↔ ${l.b}: ${l.kind}${l.count > 1 ? ` ×${l.count}` : ""}${l.generation ? ` gen ${l.generation}` : ""}, ${l.bandwidth} GB/s per direction`;
    const detail = ld ? `\n${l.a} → ${l.b}: ${fmtBytes(ld.load_ab)} (${fmtSeconds(ld.congestion_ab)})` +
      `\n${l.b} → ${l.a}: ${fmtBytes(ld.load_ba)} (${fmtSeconds(ld.congestion_ba)})` : "";
    const title = svg("title");
    title.textContent = name + detail;
    p.append(title);
    linksG.append(p);
  });
  const onGpu = load ? load.ranks_on_gpu || {} : {};
  for (const id of Object.keys(P)) {
    const dv = devs[id], pos = P[id], st = KIND_STYLE[dv.kind] || KIND_STYLE.node;
    const g = svg("g", { class: "device", "data-device": id, "data-kind": dv.kind, transform: `translate(${pos.x},${pos.y})` });
    g.append(svg("rect", { x: -st.w / 2, y: -st.h / 2, width: st.w, height: st.h, rx: 6, fill: st.fill, stroke: st.stroke, "stroke-width": 1.5 }));
    const tx = svg("text", { "text-anchor": "middle", y: 4 });
    tx.textContent = deviceLabel(dv);
    g.append(tx);
    const title = svg("title");
    title.textContent = `${id}: ${dv.name || dv.kind}` + Object.entries(dv.attrs || {}).map(([k, v]) => `\n${k}: ${v}`).join("");
    g.append(title);
    if (dv.kind === "gpu" && onGpu[String(dv.index)]) {
      const r = svg("text", { class: "ranks", "text-anchor": "middle", y: -st.h / 2 - 5 });
      r.textContent = ranksLabel(onGpu[String(dv.index)]);
      g.append(r);
    }
    devG.append(g);
  }
  root.append(linksG, devG);
  box.textContent = "";
  box.append(root);
}

function legend(box, ref) {
  box.textContent = "";
  const heatItem = el("span");
  heatItem.append("link use: 0", el("span", { class: "bar" }), `${fmtSeconds(ref)} (busiest link's bytes / bandwidth)`);
  box.append(heatItem);
  for (const [kind, dash] of Object.entries(LINK_DASH)) {
    const s = el("span");
    const sv = svg("svg", { width: 34, height: 10 });
    sv.append(svg("line", { x1: 2, y1: 5, x2: 32, y2: 5, stroke: "#64748b", "stroke-width": 2, "stroke-dasharray": dash }));
    s.append(sv, ` ${kind.replace("_", " ")}`);
    box.append(s);
  }
}

function stats(box, v, extra) {
  box.textContent = "";
  const add = (k, val, cls) => { const s = el("span"); s.append(`${k} `); const b = el("b", cls ? { class: cls } : {}, val); s.append(b); box.append(s); };
  add("max congestion", fmtSeconds(v.max_congestion));
  add("avg congestion", fmtSeconds(v.avg_congestion));
  add("routed", fmtBytes(v.routed_bytes));
  if (v.same_gpu_bytes) add("same GPU", fmtBytes(v.same_gpu_bytes));
  if (v.off_node_bytes) add("off node", fmtBytes(v.off_node_bytes));
  if (extra) extra(add);
}

function renderTopology(p) {
  const view = $("topo-view");
  if (p.status !== "fulfilled") {
    view.textContent = "";
    view.append(el("p", { class: "muted" }, p.reason.message));
    $("topo-stats").textContent = "";
    $("topo-legend").textContent = "";
    $("topo-placement").textContent = "";
    return;
  }
  const t = p.value, load = t.load;
  drawTopology(view, t, load, load.max_congestion);
  legend($("topo-legend"), load.max_congestion);
  stats($("topo-stats"), load);
  const src = load.placement.source;
  $("topo-placement").textContent = `${t.topology.name} · placement: ` +
    (src === "default" ? `default (rank r → GPU r mod ${t.pairs.gpus.length})` : src);
  renderPairs(t.pairs);
}

function renderPairs(pairs) {
  const box = $("topo-pairs");
  box.textContent = "";
  const tab = el("table", { class: "routes" });
  const head = el("tr");
  head.append(el("th", {}, ""));
  for (const g of pairs.gpus) head.append(el("th", {}, `GPU${g}`));
  tab.append(head);
  pairs.labels.forEach((row, i) => {
    const tr = el("tr");
    tr.append(el("th", {}, `GPU${pairs.gpus[i]}`));
    row.forEach((lab, j) => tr.append(el("td", { title: pairs.bandwidth[i][j] ? `${pairs.bandwidth[i][j]} GB/s` : "" }, lab)));
    tab.append(tr);
  });
  box.append(tab);
}

function renderMapping(p) {
  const empty = $("mapping-empty"), views = $("mapping-views");
  $("mapping-legend").textContent = "";
  $("mapping-note").textContent = "";
  $("mapping-toggle").hidden = true;
  if (p.status !== "fulfilled") { views.hidden = true; empty.textContent = p.reason.message; return; }
  const m = p.value;
  if (!m.mapping) { views.hidden = true; empty.textContent = m.message; return; }
  const st = m.stored;
  $("mapping-note").textContent = `mapping #${m.mapping.id} (${m.mapping.matched === "job" ? "made from this job" : "same command and size"})` +
    (m.mapping.optimal ? ", proven optimal" : "") +
    (st.max_after !== null && st.max_after !== undefined ? ` · solver: max ${fmtSeconds(st.max_before)} → ${fmtSeconds(st.max_after)}` : "");
  $("mapping-toggle").hidden = !(m.before && m.after);
  if (!m.before || !m.after) {
    views.hidden = true;
    empty.textContent = m.topology_error || m.mapping_error || "The mapping cannot be drawn on this topology.";
    return;
  }
  empty.textContent = "";
  views.hidden = false;
  const ref = Math.max(m.before.max_congestion, m.after.max_congestion);
  const topo = m.drawing;
  $("before-title").textContent = `Before — ${m.before.placement.source === "default" ? "default placement (r mod G)" : m.before.placement.source}`;
  const at = $("after-title"), red = m.routed.max_reduction;
  at.textContent = `After — mapping #${m.mapping.id}`;
  if (red !== null && red !== 0) {
    at.append(" · ", el("span", { class: red > 0 ? "good" : "bad" },
      `max congestion ${red > 0 ? "−" : "+"}${fmtPct(Math.abs(red))}`));
  }
  drawTopology($("before-view"), topo, m.before, ref);
  drawTopology($("after-view"), topo, m.after, ref);
  stats($("before-stats"), m.before);
  stats($("after-stats"), m.after);
  legend($("mapping-legend"), ref);
}

// ------------------------------------------------------------------ start
async function start() {
  try { state.info = await api("/api/info"); } catch (e) { state.info = { topologies: [], store: "?" }; }
  $("store").textContent = `store: ${state.info.store}`;
  const sel = $("topo-spec");
  const saved = localStorage.getItem("rankmap.topology");
  state.spec = state.info.topologies.includes(saved) ? saved : state.info.topology;
  for (const s of state.info.topologies) sel.append(el("option", { value: s }, s === state.info.topology ? `${s} (server default)` : s));
  sel.value = state.spec;
  sel.addEventListener("change", () => {
    state.spec = sel.value;
    localStorage.setItem("rankmap.topology", sel.value);
    if (state.jobId !== null) refreshJob(false);
  });
  for (const b of document.querySelectorAll("#mapping-toggle button")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll("#mapping-toggle button")) o.classList.toggle("on", o === b);
      const v = $("mapping-views");
      v.classList.toggle("only-before", b.dataset.show === "before");
      v.classList.toggle("only-after", b.dataset.show === "after");
    });
  }
  $("matrix-class").addEventListener("change", () => refreshJob(false));
  $("matrix-what").addEventListener("change", () => refreshJob(false));
  await loadJobs();
  const m = location.hash.match(/^#\/job\/(\d+)/);
  if (m) selectJob(Number(m[1]));
}

document.addEventListener("DOMContentLoaded", start);
