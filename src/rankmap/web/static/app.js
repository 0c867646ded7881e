// rankmap dashboard: one page over the JSON API of `rankmap serve`. No build step: the page's
// entry module (index.html loads it with <script type="module">), which imports the helpers both
// pages share from common.js and the machine page from machine.js. Every view is drawn from one
// endpoint; while a job runs the page polls every 2 s.

import {
  $, ago, api, count, el, fmtBytes, fmtCount, fmtNs, fmtPct, fmtSeconds, fmtUtil, plot, plotLayout, saveToken,
  showPlotError, takeTokenFromHash,
} from "./common.js";
import { loadMachine, wireMachine } from "./machine.js";

const POLL_MS = 2000;
const JOBS_POLL_MS = 5000;
const PLAY_MS = 250;
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
// INAM's bands: grey idle, light green, dark green, orange, red
const BAND_COLOURS = ["#c3cbd5", "#86efac", "#16a34a", "#f97316", "#dc2626"];
const DEFAULT_BANDS = [0.1, 25, 50, 75];
const MAX_SCALE = 1.4;  // a small node is drawn at most this much larger than its layout
const MIN_SCALE = 0.85; // and the mapping's before and after views at least this large (labels >= 11 px)
const SVGNS = "http://www.w3.org/2000/svg";

const state = {
  info: null, jobId: null, jobTimer: null, jobsTimer: null, seq: 0, spec: null, running: false, started: false,
  util: null, utilMode: null, frame: 0, follow: true, playTimer: null, selectedLink: null,
  mappingPick: null,  // {job, id}: the mapping chosen in a job's mapping panel (else its newest)
};

// ------------------------------------------------------------------ drawing helpers
function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
function titled(node, text) {
  const t = svg("title");
  t.textContent = text;
  node.append(t);
  return node;
}
function statusPill(job) {
  if (job.state === "incomplete") return el("span", { class: "pill bad", title: "rankmap stopped before it stored everything: rankmap ingest RUN_DIR completes it" }, "incomplete");
  if (job.state === "running") return el("span", { class: "pill run" }, "running");
  if (job.state === "failed") return el("span", { class: "pill bad", title: "the job exited with a non-zero status; what it recorded is stored" }, `failed: exit ${job.exit_status}`);
  return el("span", { class: "pill ok" }, job.exit_status === null || job.exit_status === undefined ? "finished" : `exit ${job.exit_status}`);
}
function heat(u) {  // 0..1 -> colour along HEAT
  u = Math.max(0, Math.min(1, u));
  const x = u * (HEAT.length - 1), i = Math.min(Math.floor(x), HEAT.length - 2), f = x - i;
  const a = HEAT[i], b = HEAT[i + 1];
  const c = (k) => Math.round(parseInt(a.substr(k, 2), 16) * (1 - f) + parseInt(b.substr(k, 2), 16) * f);
  return "#" + [1, 3, 5].map((k) => c(k).toString(16).padStart(2, "0")).join("");
}
function bandsParam() {
  const b = thresholds();
  return b.join(",") === DEFAULT_BANDS.join(",") ? "" : `bands=${b.join(",")}`;
}
function thresholds() {
  try {
    const b = JSON.parse(localStorage.getItem("rankmap.bands") || "null");
    if (Array.isArray(b) && b.length === 4) return b;
  } catch (e) { /* ignore */ }
  return DEFAULT_BANDS;
}

// ------------------------------------------------------------------ jobs
// The job list's commands, made to tell the jobs apart: paths cut to their last part (the full
// command is the row's tooltip), options that every listed job passes (--allow-run-as-root,
// --oversubscribe) folded into one "…", and the words some listed jobs have and others not in bold.
// Cut at the box's edge, "/usr/bin/mpirun.openmpi --allow-run-..." was every row alike.
function splitCommand(cmd) {
  return (cmd.match(/'[^']*'|"(?:\\.|[^"\\])*"|\S+/g) || []).map((w) => w.replace(/^'(.*)'$/, "$1"));
}
function shortWord(w) {
  const m = w.match(/^([^=]*=)?(.*)$/);
  const v = m[2].includes("/") && !m[2].startsWith("-") ? m[2].replace(/\/+$/, "").split("/").pop() || m[2] : m[2];
  return (m[1] || "") + v;
}
function commandLines(commands) {
  const words = commands.map((c) => splitCommand(c || "").map(shortWord));
  const count = new Map();
  for (const ws of words) for (const w of new Set(ws)) count.set(w, (count.get(w) || 0) + 1);
  const all = commands.length;
  return words.map((ws) => {
    const out = [];
    ws.forEach((w, i) => {
      const everywhere = all > 1 && count.get(w) === all;
      if (i > 0 && everywhere && w.startsWith("--") && !w.includes("=")) {
        if (out.length && out[out.length - 1].fold) return;
        out.push({ text: "…", fold: true });
        return;
      }
      out.push({ text: w, differs: all > 1 && !everywhere });
    });
    return out;
  });
}

async function loadJobs() {
  let data;
  clearTimeout(state.jobsTimer);
  try {
    data = await api("/api/jobs");
    $("store-down").hidden = true;
  } catch (e) {
    if (e.status === 503) {           // the database is down: say so, and look again
      $("store-down").textContent = `${e.message}. This page tries again every ${JOBS_POLL_MS / 1000} s.`;
      $("store-down").hidden = false;
    }
    state.jobsTimer = setTimeout(loadJobs, JOBS_POLL_MS);
    return;
  }
  const list = $("job-list");
  list.textContent = "";
  $("jobs-count").textContent = data.jobs.length ? `(${data.jobs.length})` : "";
  $("jobs-empty").hidden = data.jobs.length > 0;
  const lines = commandLines(data.jobs.map((j) => j.command));
  data.jobs.forEach((j, k) => {
    const li = el("li", { "data-job": j.id });
    if (j.id === state.jobId) li.classList.add("selected");
    const line = el("div", { class: "job-line" });
    line.append(el("span", { class: "job-id" }, `#${j.id}`), statusPill(j));
    const cmd = el("div", { class: "job-cmd", title: j.command });
    lines[k].forEach((w, i) => {
      if (i) cmd.append(" ");
      cmd.append(w.differs ? el("b", {}, w.text) : w.fold ? el("span", { class: "fold", title: "options every listed job passes" }, w.text) : w.text);
    });
    li.append(line, cmd);
    const ranks = j.world_size || j.ranks_reporting;
    li.append(el("div", { class: "job-meta" },
      [ranks ? count(ranks, "rank") : null, j.launcher === "monitor" ? null : fmtBytes(j.bytes),
        j.elapsed_ns ? fmtNs(j.elapsed_ns) : null, j.launcher, ago(j.created)].filter(Boolean).join(" · ")));
    li.addEventListener("click", () => selectJob(j.id));
    list.append(li);
  });
  clearTimeout(state.jobsTimer);
  state.jobsTimer = setTimeout(loadJobs, JOBS_POLL_MS);
}

function selectJob(id) {
  // #/job/N/mapping/M (a mapping chosen by id) is kept as it is
  if (location.hash !== `#/job/${id}` && !location.hash.startsWith(`#/job/${id}/mapping/`))
    history.replaceState(null, "", `#/job/${id}`);
  if (Number(id) !== state.jobId) {
    state.utilMode = null;
    state.selectedLink = null;
    stopPlaying();
  }
  state.jobId = Number(id);
  state.running = false;
  $("machine").hidden = true;
  $("machine-link").classList.remove("on");
  for (const li of document.querySelectorAll("#job-list li"))
    li.classList.toggle("selected", li.dataset.job === String(id));
  $("no-job").hidden = true;
  $("job").hidden = false;
  refreshJob(true);
}

function jobFromHash() {
  const m = location.hash.match(/^#\/job\/(\d+)/);
  return m ? Number(m[1]) : null;
}

// #/job/N/mapping/M: the job's mapping M, listed in its panel or older than those listed
function mappingFromHash() {
  const m = location.hash.match(/^#\/job\/(\d+)\/mapping\/(\d+)$/);
  return m ? { job: Number(m[1]), id: m[2] } : null;
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
    // a job that is not there (or never loaded) shows no other job's figures under its error
    if (e.status === 404 || first) clearJob(id);
    $("job-error").hidden = false;
    $("job-error").textContent = e.message;
    // a running job whose store is briefly busy keeps being polled; an unknown job does not
    if (state.running && e.status !== 404) state.jobTimer = setTimeout(() => refreshJob(false), POLL_MS);
    return;
  }
  if (seq !== state.seq) return;  // another job was picked meanwhile
  $("job-error").hidden = true;
  $("job").classList.remove("unknown");
  const monitor = job.job.launcher === "monitor";
  $("job").classList.toggle("monitor", monitor);
  renderHeader(job);
  // the node drawn: the one picked in the header, else the job's own (its mapping's, else the
  // server's); when none loads here the link views are not asked for at all
  const own = job.topology || { spec: null, error: "no node to draw this job's links on" };
  const drawable = Boolean(state.spec) || own.spec !== null;
  const spec = encodeURIComponent(state.spec || "");
  const sq = spec ? `spec=${spec}` : "";
  const uq = [sq, bandsParam()].filter(Boolean).join("&");
  const skip = Promise.resolve(null);
  const parts = await Promise.allSettled([
    monitor ? skip : q(`/matrix?class=${encodeURIComponent(cls)}&what=${what}`),
    monitor ? skip : q("/ops"), monitor ? skip : q("/timeline"), q("/links"), monitor ? skip : q("/cuda"),
    drawable ? api(`/api/topology?job=${id}${spec ? `&spec=${spec}` : ""}`) : skip,
    monitor ? skip : api(mappingPath(id)),
    drawable ? q(`/utilisation${uq ? `?${uq}` : ""}`) : skip,
    monitor || !drawable ? skip : q(`/cluster${uq ? `?${uq}` : ""}`),
    monitor ? skip : q("/pvars"),
  ]);
  if (seq !== state.seq) return;
  const [matrix, ops, timeline, links, cuda, topo, mapping, util, cluster, pvars] = parts;
  const guard = (fn, p, elId) => {
    try {
      if (p.status === "fulfilled") { if (p.value !== null) fn(p.value); }
      else showPlotError(elId, p.reason.message);
    } catch (e) { showPlotError(elId, String(e)); console.error(e); }
  };
  if (!monitor) {
    guard((m) => renderMatrix(m, first), matrix, "heatmap");
    guard(renderOps, ops, "ops");
    guard(renderTimeline, timeline, "timeline");
    guard(renderMem, { status: "fulfilled", value: job }, "mem");
    renderMapping(mapping);
    renderCluster(cluster);
    guard(renderPvars, pvars, "pvar");
  } else {
    $("cluster-card").hidden = true;
  }
  guard(renderLinks, links, "links");
  $("cuda-card").hidden = monitor;
  if (!monitor) guard(renderCuda, cuda, "cuda-body");
  state.running = job.running;
  renderUtilisation(topo, util, job.running, state.spec ? null : own);
  if (job.running) state.jobTimer = setTimeout(() => refreshJob(false), POLL_MS);
}

function kpi(k, v, hint) {
  const d = el("div", { class: "kpi" });
  d.append(el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  if (hint) d.append(el("div", { class: "h" }, hint));
  return d;
}

// A job that could not be loaded: its number and the error, nothing of the job shown before it.
function clearJob(id) {
  $("job").classList.add("unknown");
  $("job").classList.remove("monitor");
  $("job-title").textContent = `Job #${id}`;
  for (const k of ["job-command", "job-when", "job-status", "kpis"]) $(k).textContent = "";
  $("job-problems").hidden = true;
}

function renderHeader(data) {
  const j = data.job, s = data.summary;
  const mon = (j.meta || {}).monitor;
  $("job-title").textContent = mon ? `Monitor session #${j.id}` : `Job #${j.id}`;
  $("job-command").textContent = j.command;
  $("job-command").title = j.command;
  $("job-when").textContent = [`started ${j.created ? new Date(j.created).toLocaleString() : "?"}`,
    j.ended ? `ended ${new Date(j.ended).toLocaleString()}` : null, `launcher ${j.launcher}`,
    (j.hosts && j.hosts.length) ? `on ${j.hosts.join(", ")}` : null].filter(Boolean).join(" · ");
  const st = $("job-status");
  st.textContent = "";
  st.append(statusPill(j));
  const k = $("kpis");
  k.textContent = "";
  if (mon) {
    k.append(kpi("GPUs", String((mon.gpus || []).length), mon.host));
    k.append(kpi("counters", mon.source === "gpm" ? "NVML GPM" : "NVML fields", `every ${mon.interval_ms} ms`));
    k.append(kpi("elapsed", j.elapsed_ns ? fmtNs(j.elapsed_ns) : (data.running ? "running" : "–")));
    if (mon.cost && mon.cost.per_gpu_sample_ms !== null && mon.cost.per_gpu_sample_ms !== undefined)
      k.append(kpi("cost per GPU sample", `${(mon.cost.per_gpu_sample_ms * 1000).toFixed(0)} µs`,
        mon.process_cpu_share !== null && mon.process_cpu_share !== undefined ? `${(100 * mon.process_cpu_share).toFixed(2)} % of a core` : ""));
    $("job-problems").hidden = true;
    return;
  }
  k.append(kpi("ranks", `${s.ranks_reporting} / ${s.world_size}`, "reporting / world size"));
  k.append(kpi("bytes sent", fmtBytes(s.total_bytes), count(s.total_messages, "message")));
  k.append(kpi("elapsed", j.elapsed_ns ? fmtNs(j.elapsed_ns) : (data.running ? "running" : "–")));
  if (s.pop) {
    k.append(kpi("parallel efficiency", fmtPct(s.pop.parallel_efficiency), "load balance × comm. efficiency"));
    k.append(kpi("load balance", fmtPct(s.pop.load_balance)));
    k.append(kpi("comm. efficiency", fmtPct(s.pop.communication_efficiency)));
  }
  const classes = Object.entries(s.bytes_by_class).sort((a, b) => b[1].bytes - a[1].bytes);
  if (classes.length) k.append(kpi("top class", classes[0][0], fmtBytes(classes[0][1].bytes)));
  // problems are worth a banner; ranks that have not flushed their last record are not, while the job runs
  const probs = s.problems || [];
  const text = [probs.length ? `${count(probs.length, "problem")}: ${probs.slice(0, 3).join("; ")}` : "",
    (!data.running && s.unfinished_ranks.length) ? `ranks without a final flush: ${s.unfinished_ranks.slice(0, 16).join(", ")}` : ""]
    .filter(Boolean).join(" — ");
  const pr = $("job-problems");
  pr.textContent = text;
  pr.hidden = text === "";
  // keep the class choices of the heatmap in step with what the job has
  const sel = $("matrix-class"), have = new Set([...sel.options].map((o) => o.value));
  for (const c of Object.keys(s.bytes_by_class)) if (!have.has(c)) sel.append(el("option", { value: c }, c));
}

function renderMatrix(m) {
  const n = m.world_size, ranks = [...Array(n).keys()];
  const unit = m.what === "bytes" ? "B" : " msgs";
  const top = m.matrix.reduce((a, row) => Math.max(a, ...row), 0);
  $("heatmap-note").textContent = top ? "" : `no ${m.what} between ranks${m.classes === "all" ? "" : " in this class"}`;
  const trace = {
    type: "heatmap", z: m.matrix, x: ranks, y: ranks, xgap: n <= 64 ? 1 : 0, ygap: n <= 64 ? 1 : 0,
    zmin: 0, zmax: Math.max(top, 1),  // an all-zero matrix is blank, not one solid colour
    colorscale: [[0, "#ffffff"], [1e-9, "#eef4fb"], [0.2, "#c6dbef"], [0.45, "#6baed6"], [0.75, "#2171b5"], [1, "#08306b"]],
    hovertemplate: `rank %{y} → rank %{x}<br>%{z:,}${unit}<extra></extra>`,
    colorbar: { title: { text: m.what, side: "right" }, thickness: 12 },
  };
  // Both axes span exactly the ranks and shrink their domain to keep the cells square: left to
  // autorange, the square aspect stretched one axis past them (a rank -1 and a rank n, a 2-rank
  // grid cut off), and the grid lines showed through the gaps as dots.
  const axis = (title, range) => ({ title: { text: title }, range, dtick: n <= 16 ? 1 : undefined,
    constrain: "domain", showgrid: false, zeroline: false });
  const layout = plotLayout({
    xaxis: axis("receiver (dst rank)", [-0.5, n - 0.5]),
    yaxis: Object.assign(axis("sender (src rank)", [n - 0.5, -0.5]), { scaleanchor: "x" }),
  });
  plot("heatmap", [trace], layout);
}

/** "mirror" or "library 70%, model 30%": where an operation's pair bytes come from. */
function pairSources(o) {
  const ps = o.pair_sources || {};
  const keys = Object.keys(ps).filter((k) => ps[k] > 0).sort((a, b) => ps[b] - ps[a]);
  if (keys.length <= 1) return keys[0] || "";
  return keys.map((k) => `${k} ${Math.round((100 * ps[k]) / o.bytes)}%`).join(", ");
}

function renderOps(data) {
  const ops = data.operations;
  $("ops-note").textContent = "";
  if (!ops.length) return showPlotError("ops", "No operations recorded.");
  const names = ops.map((o) => o.operation);
  const hover = ops.map((o) => `${o.operation} (${o.class || "no pair bytes"})<br>${fmtBytes(o.bytes)} in ${count(o.messages, "message")}` +
    `<br>${count(o.calls, "call")}, ${fmtNs(o.time_ns)} summed over ${count(o.ranks, "rank")}` +
    (pairSources(o) ? `<br>pairs from: ${pairSources(o)}` : ""));
  // collective pairs: where they come from (the library, a mirror of its algorithm choice, a model)
  const coll = ops.filter((o) => o.class === "collective" && o.bytes > 0);
  if (coll.length) $("ops-note").textContent = "collective pairs from " + coll.map((o) => `${o.operation}: ${pairSources(o) || "unknown"}`).join("; ");
  const traces = [
    { type: "bar", name: "bytes", x: names, y: ops.map((o) => o.bytes), offsetgroup: 1,
      marker: { color: ops.map((o) => CLASS_COLOURS[o.class] || "#64748b") }, hovertext: hover, hoverinfo: "text" },
    { type: "bar", name: "time in call (s)", x: names, y: ops.map((o) => o.time_ns / 1e9), yaxis: "y2", offsetgroup: 2,
      marker: { color: "rgba(100,116,139,.45)" }, hovertext: hover, hoverinfo: "text" },
  ];
  plot("ops", traces, plotLayout({
    barmode: "group", margin: { l: 60, r: 60, t: 10, b: 90 },
    yaxis: { title: { text: "bytes" }, tickformat: ".2s" },
    yaxis2: { title: { text: "seconds (all ranks)" }, overlaying: "y", side: "right", showgrid: false, rangemode: "tozero" },
    xaxis: { tickangle: -30 },
  }));
}

function renderTimeline(data) {
  const classes = Object.keys(data.series);
  $("timeline-note").textContent = data.t_s.length
    ? `${data.bucket_ms} ms buckets${data.bucket_ms_assumed ? " (assumed)" : ""}` : "";
  if (!data.t_s.length) return showPlotError("timeline", "No timeline recorded.");
  const per = data.bucket_ms / 1000;
  // each bucket is a step from its start to its end, so even a job shorter than one bucket shows
  const x = [...data.t_s, data.t_s[data.t_s.length - 1] + per];
  const traces = classes.map((c) => {
    const y = data.series[c].map((b) => b / per / 1e9);
    return {
      type: "scatter", mode: "lines", stackgroup: "one", name: c, x, y: [...y, y[y.length - 1]],
      line: { width: 0.5, color: CLASS_COLOURS[c], shape: "hv" },
      hovertemplate: `${c}: %{y:.3f} GB/s from %{x:.2f} s<extra></extra>`,
    };
  });
  plot("timeline", traces, plotLayout({
    xaxis: { title: { text: "seconds since start" }, range: [x[0], x[x.length - 1]] },
    yaxis: { title: { text: "GB/s sent" }, rangemode: "tozero" },
  }));
}

function renderMem(job) {
  const mem = job.summary.bytes_by_mem;
  const kinds = Object.keys(mem).sort((a, b) => mem[b] - mem[a]);
  if (!kinds.length) return showPlotError("mem", "No bytes recorded.");
  const total = kinds.reduce((s, k) => s + mem[k], 0);
  plot("mem", [{
    type: "bar", orientation: "h", y: kinds, x: kinds.map((k) => mem[k]),
    marker: { color: kinds.map((k) => MEM_COLOURS[k] || "#64748b") },
    text: kinds.map((k) => `${fmtBytes(mem[k])} (${(100 * mem[k] / (total || 1)).toFixed(1)} %)`),
    textposition: "auto", hovertemplate: "%{y}: %{x:,} B<extra></extra>",
  }], plotLayout({ margin: { l: 80, r: 20, t: 10, b: 40 }, xaxis: { title: { text: "bytes sent from" }, tickformat: ".2s" } }));
}

function cudaTable(cols, rows, nameCols = 2) {
  const t = el("table", { class: "cuda" });
  const h = el("tr");
  cols.forEach((c) => h.appendChild(el("th", {}, c)));
  t.appendChild(h);
  rows.forEach((r) => {
    const tr = el("tr");
    r.forEach((v, i) => tr.appendChild(el("td", i < nameCols ? { class: "name" } : {}, v)));
    t.appendChild(tr);
  });
  return t;
}

function renderCuda(rep) {
  $("cuda-state").textContent = rep.state;
  const verdicts = $("cuda-verdicts"), body = $("cuda-body");
  verdicts.replaceChildren(...rep.verdicts.map((v) => el("p", { class: "verdict" }, v)));
  body.replaceChildren();
  if (!rep.table.length) {
    body.appendChild(el("p", { class: "muted" }, "No GPU copies, kernels or MPI/NCCL operations recorded for this job."));
    return;
  }
  body.appendChild(el("h4", {}, `Per process (${rep.ranks.length ? count(rep.ranks.length, "GPU rank") : "no GPU ranks"}): average, min and max over the processes`));
  body.appendChild(cudaTable(["category", "operation", "avg total time", "min", "max", "instances per process", "bytes per process"],
    rep.table.map((r) => [r.category, r.operation, fmtNs(r.avg_ns), fmtNs(r.min_ns), fmtNs(r.max_ns),
      fmtCount(Math.round(r.instances * 10) / 10), r.bytes ? fmtBytes(r.bytes) : ""])));
  if (rep.copy_kinds.length) {
    body.appendChild(el("h4", {}, "Bytes by copy kind (all ranks)"));
    body.appendChild(cudaTable(["copy kind", "copies", "bytes", "time", "GB/s", "pageable host"],
      rep.copy_kinds.map((k) => [k.kind, fmtCount(k.count), fmtBytes(k.bytes), fmtNs(k.ns),
        k.gbps ? k.gbps.toFixed(1) : "–",
        (k.kind === "H2D" || k.kind === "D2H") && k.bytes ? `${Math.round(100 * k.pageable_bytes / k.bytes)} %` : ""]), 1));
  }
  if (rep.peer_pairs.length) {
    body.appendChild(el("h4", {}, "Peer-to-peer copies"));
    body.appendChild(cudaTable(["source GPU", "destination GPU", "copies", "bytes", "GB/s"],
      rep.peer_pairs.map((p) => [p.src, p.dst, fmtCount(p.count), fmtBytes(p.bytes), p.ns ? (p.bytes / p.ns).toFixed(1) : "–"])));
  }
  if (rep.pop) {
    const k = el("div", { class: "kpis" });
    k.appendChild(kpi("device parallel efficiency", fmtPct(rep.pop.parallel_efficiency), "avg kernel time / max (kernels + copies)"));
    k.appendChild(kpi("device load balance", fmtPct(rep.pop.load_balance), "avg / max kernel time over the GPUs"));
    k.appendChild(kpi("device communication eff.", fmtPct(rep.pop.communication_efficiency), "max kernel time / max (kernels + copies)"));
    k.appendChild(kpi("GPU compute share", fmtPct(rep.pop.compute_share), "avg kernel time / runtime"));
    body.appendChild(k);
  }
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
  plot("links", traces, plotLayout({
    legend: { orientation: "v", x: 1.02, y: 1 }, margin: { l: 60, r: 10, t: 10, b: 45 },
    xaxis: { title: { text: "seconds since first sample" } }, yaxis: { title: { text: "GB/s" }, rangemode: "tozero" },
  }));
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

function ranksLabel(rs, most = 4) {
  if (!rs || !rs.length) return "";
  const shown = rs.slice(0, most).map((r) => `r${r}`).join(" ");
  return rs.length > most ? `${shown} +${rs.length - most}` : shown;
}

// The rank labels above the GPUs of one row share its width: with many ranks per GPU (64 ranks on
// 8 GPUs) "r0 r8 r16 r24 +4" ran into its neighbour's. Each label names as many ranks as fit in the
// gap to the next labelled GPU, the rest as "+N" (all of them in the GPU's tooltip). Measured once
// drawn, so it holds for any font; a hidden drawing measures 0 and keeps its labels.
function fitRankLabels(root) {
  const labels = [...root.querySelectorAll("text.ranks")].map((t) => {
    const m = t.parentNode.getAttribute("transform").match(/translate\(([-\d.]+),([-\d.]+)\)/);
    return { t, x: Number(m[1]), y: Number(m[2]), ranks: JSON.parse(t.dataset.ranks) };
  });
  for (const a of labels) {
    const gaps = labels.filter((b) => b !== a && b.y === a.y).map((b) => Math.abs(b.x - a.x));
    if (!gaps.length) continue;
    const room = Math.min(...gaps) - 6;
    for (let most = 3; most >= 1 && a.t.getComputedTextLength() > room; most--) a.t.textContent = ranksLabel(a.ranks, most);
  }
}

function linkName(l) {
  return `${l.a} ↔ ${l.b}: ${l.kind}${l.count > 1 ? ` ×${l.count}` : ""}${l.generation ? ` gen ${l.generation}` : ""}, ${l.bandwidth} GB/s per direction`;
}

// Draw the topology into `box`. `paint(i, link)` says how link i looks: {stroke, width, opacity,
// attrs, title}; `onGpu` maps GPU index -> ranks; `onClick(i)` (optional) is called on a link click.
function drawTopology(box, topo, paint, onGpu, onClick) {
  const t = topo.topology, lay = topo.layout, P = lay.positions, arcs = lay.arcs || {};
  const root = svg("svg", { viewBox: `0 0 ${lay.width} ${lay.height}`, class: "topology", role: "img",
    "aria-label": `topology ${t.name}`, style: `max-width: ${Math.round(lay.width * MAX_SCALE)}px` });
  const linksG = svg("g", { class: "links" }), devG = svg("g", { class: "devices" });
  const devs = Object.fromEntries(t.devices.map((d) => [d.id, d]));
  t.links.forEach((l, i) => {
    const a = P[l.a], b = P[l.b];
    let d;
    if (a.row === b.row) {  // links within a layer (an NVLink mesh) dip below it, each at its own depth
      const depth = (arcs[String(i)] || 26) / 0.75;  // a cubic with both handles at `depth` reaches 3/4 of it
      d = `M${a.x},${a.y} C${a.x},${a.y + depth} ${b.x},${b.y + depth} ${b.x},${b.y}`;
    } else {
      d = `M${a.x},${a.y} L${b.x},${b.y}`;
    }
    const look = paint(i, l);
    const p = svg("path", Object.assign({
      d, class: "link", "data-link": i, "data-kind": l.kind, stroke: look.stroke,
      "stroke-width": look.width.toFixed(2), "stroke-dasharray": LINK_DASH[l.kind] || "",
      "stroke-opacity": look.opacity,
    }, look.attrs || {}));
    titled(p, `${linkName(l)}${look.title ? "\n" + look.title : ""}`);
    if (onClick) p.addEventListener("click", () => onClick(i));
    linksG.append(p);
  });
  for (const id of Object.keys(P)) {
    const dv = devs[id], pos = P[id], st = KIND_STYLE[dv.kind] || KIND_STYLE.node;
    const g = svg("g", { class: "device", "data-device": id, "data-kind": dv.kind, transform: `translate(${pos.x},${pos.y})` });
    g.append(svg("rect", { x: -st.w / 2, y: -st.h / 2, width: st.w, height: st.h, rx: 6, fill: st.fill, stroke: st.stroke, "stroke-width": 1.5 }));
    const tx = svg("text", { "text-anchor": "middle", y: 4 });
    tx.textContent = deviceLabel(dv);
    g.append(tx);
    const ranks = dv.kind === "gpu" && onGpu ? onGpu[String(dv.index)] : null;
    titled(g, `${id}: ${dv.name || dv.kind}` + Object.entries(dv.attrs || {}).map(([k, v]) => `\n${k}: ${v}`).join("") +
      (ranks && ranks.length ? `\n${ranks.length === 1 ? "rank" : "ranks"}: ${ranks.join(", ")}` : ""));
    if (ranks) {
      const r = svg("text", { class: "ranks", "text-anchor": "middle", y: -st.h / 2 - 5, "data-ranks": JSON.stringify(ranks) });
      r.textContent = ranksLabel(ranks);
      g.append(r);
    }
    devG.append(g);
  }
  root.append(linksG, devG);
  box.textContent = "";
  box.append(root);
  fitRankLabels(root);
}

// congestion relative to `ref` (the busiest link of the views compared): the mapping view
function congestionPainter(load, ref) {
  return (i) => {
    const ld = load.links[i];
    const bytes = ld.load_ab + ld.load_ba;
    const cong = Math.max(ld.congestion_ab, ld.congestion_ba);
    const use = ref > 0 ? cong / ref : 0;
    return {
      stroke: bytes > 0 ? heat(use) : IDLE_LINK, width: bytes > 0 ? 2.5 + 8 * use : 1.5, opacity: bytes > 0 ? 0.95 : 0.8,
      attrs: { "data-load": bytes, "data-use": use.toFixed(4) },
      title: `${ld.a} → ${ld.b}: ${fmtBytes(ld.load_ab)} (${fmtSeconds(ld.congestion_ab)})\n` +
        `${ld.b} → ${ld.a}: ${fmtBytes(ld.load_ba)} (${fmtSeconds(ld.congestion_ba)})`,
    };
  };
}

function congestionLegend(box, ref) {
  box.textContent = "";
  const heatItem = el("span");
  heatItem.append("link use: 0", el("span", { class: "bar" }), `${fmtSeconds(ref)} (busiest link's bytes / bandwidth)`);
  box.append(heatItem);
  kindLegend(box);
}

function kindLegend(box) {
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

// ------------------------------------------------------------------ utilisation view
function utilPainter(u, whole, frame) {
  return (i) => {
    const r = u.links[i];
    if (!r || r.source === "none" || !r.util_ab) {
      return { stroke: IDLE_LINK, width: 1.2, opacity: 0.5, attrs: { "data-source": "none", "data-band": "", "data-util": "" },
        title: "no counter and no modelled traffic for this link" };
    }
    const ua = whole ? null : r.util_ab[frame], ub = whole ? null : r.util_ba[frame];
    const util = whole ? r.avg_util : Math.max(ua, ub);
    const band = whole ? r.avg_band : r.band[frame];
    const gbps = (x) => (x / 100 * r.bandwidth).toFixed(2);
    const src = r.source === "measured" ? `measured (${r.measured_as})` : "traffic model";
    const detail = whole
      ? `whole job: ${fmtBytes(r.bytes_ab)} ${r.a} → ${r.b}, ${fmtBytes(r.bytes_ba)} ${r.b} → ${r.a}; average ${fmtUtil(r.avg_util)}, peak ${fmtUtil(r.peak_util)}`
      : `${r.a} → ${r.b}: ${gbps(ua)} GB/s (${fmtUtil(ua)})\n${r.b} → ${r.a}: ${gbps(ub)} GB/s (${fmtUtil(ub)})`;
    return {
      stroke: BAND_COLOURS[band], width: band ? 2.5 + 6 * Math.min(util, 100) / 100 : 1.5,
      opacity: r.source === "measured" ? 1 : 0.8,
      attrs: { "data-band": band, "data-util": util.toFixed(4), "data-source": r.source, "data-load": whole ? r.bytes_ab + r.bytes_ba : "" },
      title: `${src}\n${detail}\nclick for its TX/RX over time`,
    };
  };
}

function bandLegend(box, u) {
  box.textContent = "";
  const t = u.thresholds;
  const names = [`idle (< ${t[0]} %)`, `≤ ${t[1]} %`, `≤ ${t[2]} %`, `≤ ${t[3]} %`, `> ${t[3]} %`];
  names.forEach((n, i) => {
    const s = el("span", { class: "band", "data-band": i });
    s.append(el("span", { class: "swatch", style: `background:${BAND_COLOURS[i]}` }), n);
    box.append(s);
  });
  box.append(el("span", { class: "muted" }, "of the link's bandwidth, busier direction"));
  kindLegend(box);
}

// `own`: the job's own node when the page picked none ({spec, source, error}), else null
function renderUtilisation(topoP, utilP, running, own) {
  const view = $("topo-view");
  if (topoP.status !== "fulfilled" || utilP.status !== "fulfilled" || topoP.value === null) {
    const why = topoP.status !== "fulfilled" ? topoP.reason.message
      : utilP.status !== "fulfilled" ? utilP.reason.message : (own && own.error) || "";
    view.textContent = "";
    view.append(el("p", { class: "muted" }, why));
    for (const id of ["topo-stats", "topo-legend", "topo-placement", "util-source"]) $(id).textContent = "";
    $("util-controls").hidden = true;
    return;
  }
  const t = topoP.value, u = utilP.value;
  state.topo = t;
  state.util = u;
  if (state.utilMode === null) {  // a new job: a running one follows its newest frame
    state.utilMode = running ? "time" : "whole";
    state.follow = true;
  }
  if (state.utilMode === "time" && (state.follow || state.frame >= u.frames)) state.frame = u.frames - 1;
  const load = t.load;
  $("topo-placement").textContent = `${t.topology.name}${own && own.source ? ` (${own.source})` : ""} · placement: ` +
    (load.placement.source === "default" ? `default (rank r → GPU r mod ${t.pairs.gpus.length})`
      : load.placement.source === "default per host" ? `default on each host (its k-th rank → GPU k mod ${t.pairs.gpus.length}); every host's in-node traffic drawn on this node`
      : load.placement.source);
  const parts = [];
  if (u.measured && u.measured.links) parts.push(`${count(u.measured.links, "link")} measured by ${u.measured.source} (${u.measured.kind === "gpm" ? "NVML GPM" : u.measured.kind === "fields" ? "NVML counters" : "NVML"})`);
  if (u.model && u.model.links) parts.push(`${count(u.model.links, "link")} from the traffic model`);
  $("util-source").textContent = parts.join(" · ") + (u.notes.length ? ` — ${u.notes.join("; ")}` : "");
  const slider = $("util-slider");
  slider.max = String(u.frames - 1);
  slider.value = String(state.frame);
  $("util-controls").hidden = false;
  paintUtilisation();
  stats($("topo-stats"), load);
  bandLegend($("topo-legend"), u);
  renderPairs(t.pairs);
}

function paintUtilisation() {
  const u = state.util, t = state.topo;
  if (!u || !t) return;
  const whole = state.utilMode === "whole";
  for (const b of document.querySelectorAll("#util-mode button")) b.classList.toggle("on", b.dataset.mode === state.utilMode);
  $("util-slider").disabled = whole;
  $("util-play").disabled = whole;
  const f = Math.min(state.frame, u.frames - 1);
  $("util-time").textContent = whole
    ? `whole job: ${u.duration_s.toFixed(2)} s, average use`
    : `${u.t_s[f].toFixed(2)}–${(u.t_s[f] + u.frame_s).toFixed(2)} s of ${u.duration_s.toFixed(2)} s (frame ${f + 1}/${u.frames})`;
  drawTopology($("topo-view"), t, utilPainter(u, whole, f), t.load.ranks_on_gpu || {}, (i) => selectLink(i));
  renderLinkSeries();
}

function selectLink(i) {
  state.selectedLink = i;
  renderLinkSeries();
}

function renderLinkSeries() {
  const box = $("link-series-box"), u = state.util;
  const r = u && state.selectedLink !== null ? u.links[state.selectedLink] : null;
  if (!r || !r.util_ab) { box.hidden = true; return; }
  box.hidden = false;
  $("link-series-title").textContent = `${r.a} ↔ ${r.b} (${r.kind}, ${r.bandwidth} GB/s per direction): ` +
    (r.source === "measured" ? `measured, ${r.measured_as}` : "from the traffic model");
  const x = u.t_s.map((t) => t + u.frame_s / 2);
  const gb = (a) => a.map((v) => v / 100 * r.bandwidth);
  const shapes = [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: r.bandwidth, y1: r.bandwidth,
    line: { dash: "dash", width: 1, color: "#94a3b8" } }];
  if (state.utilMode === "time") {
    const tt = u.t_s[Math.min(state.frame, u.frames - 1)] + u.frame_s / 2;
    shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: tt, x1: tt, line: { width: 1, color: "#0f172a" } });
  }
  plot("link-series", [
    { type: "scatter", mode: "lines+markers", name: `${r.a} → ${r.b}`, x, y: gb(r.util_ab), line: { color: "#2563eb" },
      hovertemplate: `${r.a} → ${r.b}: %{y:.2f} GB/s at %{x:.2f} s<extra></extra>` },
    { type: "scatter", mode: "lines+markers", name: `${r.b} → ${r.a}`, x, y: gb(r.util_ba), line: { color: "#f97316", dash: "dot" },
      hovertemplate: `${r.b} → ${r.a}: %{y:.2f} GB/s at %{x:.2f} s<extra></extra>` },
  ], plotLayout({
    shapes, margin: { l: 60, r: 20, t: 10, b: 45 }, xaxis: { title: { text: "seconds since the job's start" } },
    yaxis: { title: { text: "GB/s" }, rangemode: "tozero", range: [0, r.bandwidth * 1.05] },
  }));
}

function stopPlaying() {
  clearInterval(state.playTimer);
  state.playTimer = null;
  $("util-play").textContent = "▶ play";
}

function play() {
  const u = state.util;
  if (!u) return;
  if (state.playTimer) return stopPlaying();
  if (state.frame >= u.frames - 1) state.frame = 0;
  state.follow = false;
  $("util-play").textContent = "❚❚ pause";
  state.playTimer = setInterval(() => {
    if (state.frame >= state.util.frames - 1) { state.follow = true; return stopPlaying(); }
    state.frame += 1;
    $("util-slider").value = String(state.frame);
    paintUtilisation();
  }, PLAY_MS);
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

// ------------------------------------------------------------------ MPI_T performance variables
function renderPvars(data) {
  const sel = $("pvar-name"), empty = $("pvar-empty");
  const vars = data.variables || [];
  empty.hidden = vars.length > 0;
  empty.textContent = data.message || "";
  sel.hidden = !vars.length;
  $("pvar").hidden = !vars.length;
  if (!vars.length) { $("pvar-note").textContent = ""; return; }
  const keep = sel.value;
  sel.textContent = "";
  for (const v of vars) sel.append(el("option", { value: v.name }, `${v.name}${v.class ? ` (${v.class})` : ""}`));
  sel.value = vars.some((v) => v.name === keep) ? keep : vars[0].name;
  drawPvar();
}

async function drawPvar() {
  const name = $("pvar-name").value, id = state.jobId;
  if (!name) return;
  let d;
  try { d = await api(`/api/jobs/${id}/pvars?name=${encodeURIComponent(name)}`); }
  catch (e) { return showPlotError("pvar", e.message); }
  if (id !== state.jobId || name !== $("pvar-name").value) return;
  const v = d.variables.find((x) => x.name === name) || {};
  $("pvar-note").textContent = `${v.class || "variable"}, ${count(d.ranks, "rank")}` +
    (d.ranks_shown < d.ranks ? `, the first ${d.ranks_shown} shown` : "") + "; read at every flush and at finalize";
  plot("pvar", d.series.map((s) => ({
    type: "scatter", mode: "lines+markers", name: `rank ${s.rank}`, x: s.t_s, y: s.value,
    hovertemplate: `rank ${s.rank}: %{y:,} at %{x:.2f} s<extra></extra>`,
  })), plotLayout({ margin: { l: 70, r: 20, t: 10, b: 45 }, legend: { orientation: "v", x: 1.02, y: 1 },
    xaxis: { title: { text: "seconds since the rank's start" } }, yaxis: { title: { text: name } } }));
}

// ------------------------------------------------------------------ multi-node view
function renderCluster(p) {
  const card = $("cluster-card");
  if (p.status !== "fulfilled" || !p.value || !p.value.multi_node) { card.hidden = true; return; }
  card.hidden = false;
  const c = p.value, H = c.nodes.length;
  const maxNics = Math.max(1, ...c.nodes.map((n) => n.nics.length));
  const NW = Math.max(230, maxNics * 52 + 16), GAP = 40, TOP = 120;
  // GPU chips: as many per row as the node's width holds, and the node as tall as its rows
  const per = Math.max(1, Math.floor((NW - 16) / 44));
  const maxGpus = Math.max(1, ...c.nodes.map((n) => Object.keys(n.gpus).length));
  const NH = Math.max(130, 40 + Math.ceil(maxGpus / per) * 24 + 28);
  const W = Math.max(H * (NW + GAP) + GAP, 400), HT = TOP + NH + 70 + 14 * H;
  const root = svg("svg", { viewBox: `0 0 ${W} ${HT}`, class: "cluster", role: "img", "aria-label": "nodes and network",
    style: `max-width: ${Math.round(W * MAX_SCALE)}px` });
  const sw = { x: W / 2, y: 36 };
  const links = svg("g"), boxes = svg("g"), arcs = svg("g");
  const maxPair = Math.max(1, ...c.node_bytes.flat());
  const nx = (u) => GAP + u * (NW + GAP);
  c.nodes.forEach((n, u) => {
    const x0 = nx(u);
    const g = svg("g", { class: "node", "data-node": n.name, transform: `translate(${x0},${TOP})` });
    g.append(svg("rect", { width: NW, height: NH, rx: 10, fill: "#f8fafc", stroke: "#334155", "stroke-width": 1.5 }));
    const name = svg("text", { x: 10, y: NH - 10, class: "node-name" });
    name.textContent = n.name;
    g.append(name);
    const gpus = Object.entries(n.gpus);
    // each chip named: an unnamed grid of boxes said nothing without a hover
    gpus.forEach(([gi, rs], k) => {
      const gx = 10 + (k % per) * 44, gy = 40 + Math.floor(k / per) * 24;
      const chip = svg("g", { class: "node-gpu", "data-gpu": gi, transform: `translate(${gx},${gy})` });
      chip.append(svg("rect", { width: 40, height: 20, rx: 3, fill: rs.length ? "#ecf7e2" : "#fff", stroke: "#4d8f1c" }));
      const label = svg("text", { x: 20, y: 14, "text-anchor": "middle" });
      label.textContent = `GPU${gi}`;
      chip.append(label);
      titled(chip, `${n.name} GPU${gi}: ${rs.length ? (rs.length === 1 ? "rank " : "ranks ") + rs.join(", ") : "no rank"}`);
      g.append(chip);
    });
    titled(g, `${n.name}: ${count(n.ranks.length, "rank")}; busiest in-node link at ${fmtUtil(n.local_peak_util)} (whole job)`);
    n.nics.forEach((nic, k) => {
      const cx = x0 + (k + 1) * NW / (n.nics.length + 1);
      const nb = svg("g", { class: "node-nic", transform: `translate(${cx - x0},0)` });
      nb.append(svg("rect", { x: -22, y: -9, width: 44, height: 18, rx: 4, fill: "#fce7f3", stroke: "#be185d" }));
      const label = svg("text", { y: 3.5, "text-anchor": "middle" });
      label.textContent = nic.name.length > 8 ? `${nic.name.slice(0, 7)}…` : nic.name;
      nb.append(label);
      titled(nb, `${n.name} ${nic.name}: ${nic.bandwidth} GB/s per direction`);
      g.append(nb);
      const util = Math.max(nic.up_util, nic.down_util);
      const line = svg("path", { d: `M${cx},${TOP - 9} L${sw.x},${sw.y + 15}`, class: "net-link", "data-node": n.name,
        "data-nic": nic.id, "data-band": nic.band, "data-util": util.toFixed(4), stroke: BAND_COLOURS[nic.band],
        "stroke-width": (nic.band ? 2.5 + 6 * Math.min(util, 100) / 100 : 1.5).toFixed(2), "stroke-dasharray": LINK_DASH.network });
      titled(line, `${n.name} ${nic.name} ↔ network (model, whole job)\nto the network: ${fmtBytes(nic.up_bytes)} (${fmtUtil(nic.up_util)})` +
        `\nfrom the network: ${fmtBytes(nic.down_bytes)} (${fmtUtil(nic.down_util)})`);
      links.append(line);
    });
    boxes.append(g);
  });
  // off-node traffic: one arc per node pair under the boxes, as wide as its bytes
  let lane = 0;
  for (let a = 0; a < H; a++) for (let b = a + 1; b < H; b++) {
    const ab = c.node_bytes[a][b], ba = c.node_bytes[b][a];
    if (!ab && !ba) continue;
    const xa = nx(a) + NW / 2, xb = nx(b) + NW / 2, y = TOP + NH, depth = 30 + 14 * lane++;
    const arc = svg("path", { d: `M${xa},${y} C${xa},${y + depth / 0.75} ${xb},${y + depth / 0.75} ${xb},${y}`, class: "node-pair",
      "data-a": c.nodes[a].name, "data-b": c.nodes[b].name, "data-bytes": ab + ba, fill: "none", stroke: "#6366f1",
      "stroke-opacity": 0.8, "stroke-width": (1.5 + 7 * (ab + ba) / (2 * maxPair)).toFixed(2) });
    titled(arc, `${c.nodes[a].name} → ${c.nodes[b].name}: ${fmtBytes(ab)}\n${c.nodes[b].name} → ${c.nodes[a].name}: ${fmtBytes(ba)}`);
    arcs.append(arc);
  }
  const s = svg("g", { class: "switch", transform: `translate(${sw.x},${sw.y})` });
  s.append(svg("rect", { x: -60, y: -15, width: 120, height: 30, rx: 6, fill: "#f1f5f9", stroke: "#334155" }));
  const st = svg("text", { "text-anchor": "middle", y: 4 });
  st.textContent = "network";
  s.append(st);
  titled(s, "one non-blocking switch (the model: only the NIC links can congest)");
  root.append(links, arcs, boxes, s);
  const view = $("cluster-view");
  view.textContent = "";
  view.append(root);
  $("cluster-note").textContent = `${H} nodes, ${fmtBytes(c.off_node_bytes)} between nodes; NIC links coloured by use of their bandwidth ` +
    `over the whole job (${c.duration_s.toFixed(2)} s), from the traffic model` + (c.unplaced_ranks.length ? `; ${count(c.unplaced_ranks.length, "rank")} of unknown host left out` : "");
}

// ------------------------------------------------------------------ mapping view
// The basis of a mapping's figures beside them: a what-if (GPU-resident buffers the recorded job did
// not have) is a badge with its assumption in words, so its gain is never read as the recorded run's.
function renderBasis(mapping) {
  const badge = $("mapping-basis"), said = $("mapping-assumption");
  badge.textContent = "";
  said.textContent = "";
  said.hidden = true;
  if (!mapping) return;
  if (!mapping.what_if) { badge.append(el("span", { class: "muted small" }, mapping.label)); return; }
  badge.append(el("span", { class: "pill what-if", title: "the figures below are not those of the recorded run" }, mapping.label));
  if (mapping.assumption) { said.textContent = mapping.assumption; said.hidden = false; }
}

// The mapping endpoint for a job: the one picked in its panel, else the newest.
function mappingPath(id) {
  const pick = state.mappingPick && state.mappingPick.job === id ? state.mappingPick.id : null;
  const qs = [state.spec ? `spec=${encodeURIComponent(state.spec)}` : "",
    pick !== null ? `id=${encodeURIComponent(pick)}` : ""].filter(Boolean).join("&");
  return `/api/jobs/${id}/mapping${qs ? `?${qs}` : ""}`;
}

// A job with several stored mappings (say a what-if and the as-recorded one) offers each in a
// selector, named by id, time stored and basis; with one there is nothing to choose. The API lists
// the newest few: past them the panel says how many more there are and how to open one by id, and a
// mapping so opened joins the selector, after the listed ones, as the one chosen.
function renderMappingPick(m) {
  const pick = $("mapping-pick"), older = $("mapping-older");
  const list = (m && m.mapping && m.mappings) || [];
  const cut = Boolean(m && m.mapping && m.mappings_truncated);
  const shown = m && m.mapping && !list.some((x) => x.id === m.mapping.id) ? m.mapping : null;
  pick.hidden = list.length + (shown ? 1 : 0) < 2;
  older.hidden = !cut;
  older.textContent = cut ? `${m.mappings_total} mappings stored; the newest ${list.length} are listed. Open an ` +
    `older one by its id (rankmap map --save and rankmap tune print it) with #/job/${m.job}/mapping/ID in the ` +
    `address bar, or GET /api/jobs/${m.job}/mapping?id=ID.` : "";
  const option = (x) => {
    const when = x.created ? `${x.created.slice(0, 19).replace("T", " ")} UTC` : "time unknown";
    return el("option", { value: String(x.id) }, `#${x.id} · ${when} · ${x.label}`);
  };
  const key = JSON.stringify([list.map((x) => [x.id, x.created, x.label]), shown && shown.id, cut && m.mappings_total]);
  if (pick.dataset.key !== key) {  // rebuilt only when the list changed, so a poll leaves an open list be
    pick.textContent = "";
    for (const x of list) pick.append(option(x));
    if (cut) pick.append(el("option", { disabled: "" }, `… ${m.mappings_total - list.length} older not listed`));
    if (shown) pick.append(option(shown));
    pick.dataset.key = key;
  }
  if (!pick.hidden) pick.value = String(m.mapping.id);
}

async function pickMapping() {
  const id = state.jobId;
  state.mappingPick = { job: id, id: $("mapping-pick").value };
  history.replaceState(null, "", `#/job/${id}/mapping/${state.mappingPick.id}`);  // a reload keeps the choice
  let p;
  try { p = { status: "fulfilled", value: await api(mappingPath(id)) }; } catch (e) {
    p = { status: "rejected", reason: e };
    state.mappingPick = null;  // the next refresh shows the newest again, with its selector
    if (id === state.jobId) history.replaceState(null, "", `#/job/${id}`);
  }
  if (id === state.jobId) renderMapping(p);
}

// Why the panel shows no mapping. A mapping asked for by id (#/job/J/mapping/M) that is not one of
// J's is said to be another job's, with a link to it there, or not stored at all, and a link back to
// J's own: the page stays on J, the job the address names, rather than switching under the reader.
function notShown(empty, p) {
  empty.textContent = p ? p.reason.message : "";
  const b = p && p.reason.body;
  if (!b || p.reason.status !== 404 || b.mapping === undefined || b.job !== state.jobId) return;
  empty.textContent = b.owner_job !== null ? `Mapping #${b.mapping} belongs to job #${b.owner_job}, not to job #${b.job}. ` :
    b.stored ? `Mapping #${b.mapping} belongs to no stored job. ` : `Mapping #${b.mapping} is not stored. `;
  if (b.owner_job !== null)
    empty.append(el("a", { href: `#/job/${b.owner_job}/mapping/${b.mapping}` }, `Open it with job #${b.owner_job}`), " · ");
  empty.append(el("a", { href: `#/job/${b.job}` }, `Show job #${b.job}'s own mappings`));
}

function renderMapping(p) {
  const empty = $("mapping-empty"), views = $("mapping-views");
  renderMappingPick(p && p.status === "fulfilled" ? p.value : null);
  $("mapping-legend").textContent = "";
  $("mapping-note").textContent = "";
  $("mapping-toggle").hidden = true;
  renderBasis(p && p.status === "fulfilled" ? p.value.mapping : null);
  if (!p || p.status !== "fulfilled") { views.hidden = true; notShown(empty, p); return; }
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
  // side by side only where each drawing keeps most of its size: two DGX-1s in half a card each
  // were drawn at half scale, their labels 6 px tall; else one above the other
  views.style.setProperty("--pane", `${Math.round(topo.layout.width * MIN_SCALE)}px`);
  $("before-title").textContent = `Before — ${m.before.placement.source === "default" ? "default placement (r mod G)" : m.before.placement.source}`;
  const at = $("after-title"), red = m.routed.max_reduction;
  at.textContent = `After — mapping #${m.mapping.id}`;
  if (red !== null && red !== 0) {
    at.append(" · ", el("span", { class: red > 0 ? "good" : "bad" },
      `max congestion ${red > 0 ? "−" : "+"}${fmtPct(Math.abs(red))}`));
  }
  if (m.mapping.what_if) at.append(" ", el("span", { class: "pill what-if" }, "what-if"));
  drawTopology($("before-view"), topo, congestionPainter(m.before, ref), m.before.ranks_on_gpu);
  drawTopology($("after-view"), topo, congestionPainter(m.after, ref), m.after.ranks_on_gpu);
  stats($("before-stats"), m.before);
  stats($("after-stats"), m.after);
  congestionLegend($("mapping-legend"), ref);
}

// ------------------------------------------------------------------ machine page
// Leave the job shown (its polling stops) for the machine page, which machine.js draws.
function showMachine() {
  if (location.hash !== "#/machine") history.replaceState(null, "", "#/machine");
  state.jobId = null;
  clearTimeout(state.jobTimer);
  for (const li of document.querySelectorAll("#job-list li")) li.classList.remove("selected");
  $("no-job").hidden = true;
  $("job").hidden = true;
  $("machine").hidden = false;
  $("machine-link").classList.add("on");
  return loadMachine();
}

// ------------------------------------------------------------------ start
function bandInputs() {
  const b = thresholds();
  document.querySelectorAll("#band-edges input").forEach((inp, i) => { inp.value = String(b[i]); });
  $("band-edges").addEventListener("change", () => {
    const vals = [...document.querySelectorAll("#band-edges input")].map((i) => Number(i.value));
    const ok = vals.every((v, i) => Number.isFinite(v) && v >= 0 && (i === 0 || v > vals[i - 1]));
    $("band-error").textContent = ok ? "" : "each edge must be larger than the one before";
    if (!ok) return;
    localStorage.setItem("rankmap.bands", JSON.stringify(vals));
    if (state.jobId !== null) refreshJob(false);
  });
  $("band-reset").addEventListener("click", () => {
    localStorage.removeItem("rankmap.bands");
    document.querySelectorAll("#band-edges input").forEach((inp, i) => { inp.value = String(DEFAULT_BANDS[i]); });
    $("band-error").textContent = "";
    if (state.jobId !== null) refreshJob(false);
  });
}

async function start() {
  if (state.started) return;
  try { state.info = await api("/api/info"); } catch (e) { if (e.status === 401) return; state.info = { topologies: [], store: "?" }; }
  state.started = true;
  $("store").textContent = `store: ${state.info.store}`;
  const sel = $("topo-spec");
  const saved = localStorage.getItem("rankmap.topology");
  // "": each job on its own node (its mapping's, else the server's), unless the reader picked one
  state.spec = saved && state.info.topologies.includes(saved) ? saved : "";
  sel.append(el("option", { value: "" }, "each job's own"));
  for (const s of state.info.topologies) sel.append(el("option", { value: s }, s === state.info.topology ? `${s} (server default)` : s));
  sel.value = state.spec;
  await loadJobs();
  state.mappingPick = mappingFromHash();
  const id = jobFromHash();
  if (id !== null) selectJob(id);
  else if (location.hash === "#/machine") showMachine();
}

function wire() {
  takeTokenFromHash();
  $("auth-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    saveToken($("auth-token").value.trim());
    $("auth").hidden = true;
    if (state.started) { loadJobs(); if (state.jobId !== null) refreshJob(false); } else start();
  });
  $("topo-spec").addEventListener("change", () => {
    state.spec = $("topo-spec").value;
    localStorage.setItem("rankmap.topology", state.spec);
    state.selectedLink = null;
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
  for (const b of document.querySelectorAll("#util-mode button")) {
    b.addEventListener("click", () => {
      state.utilMode = b.dataset.mode;
      if (b.dataset.mode === "whole") stopPlaying();
      paintUtilisation();
    });
  }
  $("util-slider").addEventListener("input", () => {
    stopPlaying();
    state.utilMode = "time";
    state.frame = Number($("util-slider").value);
    state.follow = state.util && state.frame >= state.util.frames - 1;  // at the end: keep following a live job
    paintUtilisation();
  });
  $("util-play").addEventListener("click", play);
  $("pvar-name").addEventListener("change", drawPvar);
  $("mapping-pick").addEventListener("change", pickMapping);
  $("matrix-class").addEventListener("change", () => refreshJob(false));
  $("matrix-what").addEventListener("change", () => refreshJob(false));
  // #/job/N typed into the address bar (or history back/forward) opens that job without a reload
  window.addEventListener("hashchange", () => {
    if (takeTokenFromHash()) {  // a token URL pasted into an open tab: use it now
      $("auth").hidden = true;
      if (!state.started) { start(); return; }
      loadJobs();
      if (state.jobId !== null && jobFromHash() === state.jobId) refreshJob(false);
    }
    // the address is what is asked for: #/job/N after #/job/N/mapping/M shows N's newest again
    const id = jobFromHash(), pick = mappingFromHash(), was = state.mappingPick;
    const picked = (pick === null) !== (was === null) || (pick !== null && (was.job !== pick.job || was.id !== pick.id));
    state.mappingPick = pick;
    if (id !== null && (id !== state.jobId || picked) && state.started) selectJob(id);
    else if (location.hash === "#/machine" && state.started && $("machine").hidden) showMachine();
  });
  $("machine-link").addEventListener("click", (e) => { e.preventDefault(); showMachine(); });
  wireMachine();
  bandInputs();
  start();
}

document.addEventListener("DOMContentLoaded", wire);
