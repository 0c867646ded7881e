// rankmap dashboard, machine page: what `rankmap bench p2p|mpi|nccl` measured on a host, from
// /api/machine. An ES module: app.js shows the page's section and calls loadMachine to fill it.

import { $, api, count, el, plot, plotLayout, showPlotError } from "./common.js";

const BUFFER_COLOURS = { host: "#2563eb", device: "#76b900", "device-staged": "#f59e0b", "device-ipc": "#8b5cf6" };
const P2P_LABELS = {
  ce_write: "CE, source pushes", ce_read: "CE, destination pulls", ce_bidir_write: "CE both ways (push), total",
  ce_bidir_read: "CE both ways (pull), total", sm_write: "SM copy on source", sm_read: "SM copy on destination",
  sm_bidir: "SM both ways, total", latency_ce: "small CE copy (µs)", latency_sm: "dependent load (µs)",
  h2d_pinned: "host→GPU pinned", d2h_pinned: "GPU→host pinned", h2d_pageable: "host→GPU pageable",
  d2h_pageable: "GPU→host pageable",
};
const machineState = { host: null, data: null };
// the cards of each kind of run (by an element inside each), and the command that makes one
const CARDS = { p2p: ["p2p-matrix", "p2p-table"], mpi: ["mpi-latency", "mpi-bw"], nccl: ["nccl-busbw"] };
const RUN_HINT = { p2p: "rankmap bench p2p", mpi: "rankmap bench mpi -- mpirun -np 2", nccl: "rankmap bench nccl -- mpirun -np 2" };

function sizeLabel(n) {
  for (const [u, k] of [["GiB", 30], ["MiB", 20], ["KiB", 10]]) if (n >= 2 ** k && n % 2 ** k === 0) return `${n / 2 ** k} ${u}`;
  return `${n} B`;
}
function where(g) { return g === -1 ? "host" : `GPU${g}`; }
function notRun(run) { return (run && run.not_run && run.not_run.length) ? `not measured: ${run.not_run.join("; ")}` : ""; }
// a card's note: its parts that say something, joined (no dangling "run #1 ·")
function note(...parts) { return parts.filter(Boolean).join(" · "); }

// Log axes a person can read. Plotly labels a log axis's minor ticks "2" and "5" (10, 2, 5, 100, 2,
// 5): sizes are ticked at the measured sizes by name (8 B, 4 KiB, 1 MiB: at most about eight), and
// values at 1-2-5 steps written out whole (0.5, 1, 2, 5, 10), decades only over a wide range.
function sizeAxis(sizes, title) {
  const all = [...new Set(sizes)].sort((a, b) => a - b);
  const step = Math.max(1, Math.ceil(all.length / 8));
  const vals = all.filter((_, i) => i % step === 0);
  return { type: "log", title: { text: title }, tickvals: vals, ticktext: vals.map(sizeLabel) };
}
function valueAxis(values, title) {
  const v = values.filter((x) => x > 0);
  if (!v.length) return { type: "log", title: { text: title } };
  const lo = Math.min(...v), hi = Math.max(...v);
  const decades = Math.log10(hi / lo);
  const steps = decades > 3 ? [1] : decades > 1.5 ? [1, 3] : [1, 2, 5];
  const vals = [];
  for (let e = Math.floor(Math.log10(lo)) - 1; e <= Math.ceil(Math.log10(hi)) + 1; e++)
    for (const m of steps) {
      const x = m * 10 ** e;
      if (x >= lo / 1.5 && x <= hi * 1.5) vals.push(Number(x.toPrecision(3)));
    }
  return { type: "log", title: { text: title }, tickvals: vals, ticktext: vals.map((x) => String(x)) };
}

// The newest runs of the chosen host (else of the newest run's), drawn into the #machine section.
export async function loadMachine() {
  let data;
  try {
    data = await api(`/api/machine${machineState.host ? `?host=${encodeURIComponent(machineState.host)}` : ""}`);
  } catch (e) {
    $("machine-empty").hidden = false;
    $("machine-empty").textContent = e.message;
    return;
  }
  machineState.data = data;
  machineState.host = data.host;
  const sel = $("machine-host");
  sel.textContent = "";
  for (const h of data.hosts) sel.append(el("option", { value: h }, h));
  sel.value = data.host || "";
  $("machine-title").textContent = data.host ? `Machine ${data.host}` : "Machine";
  const any = Object.values(data.runs).some(Boolean);
  $("machine-empty").hidden = any;
  $("machine-cards").hidden = !any;
  if (!any) return;
  const dates = Object.values(data.runs).filter(Boolean).map((r) => r.created).sort();
  $("machine-when").textContent = `newest run ${new Date(dates[dates.length - 1]).toLocaleString()}`;
  // a kind of benchmark never run on this host: its cards are left out, and one line says how to run it
  for (const [kind, cards] of Object.entries(CARDS)) for (const c of cards) $(c).closest(".card").hidden = !data.runs[kind];
  const missing = Object.keys(CARDS).filter((k) => !data.runs[k]);
  $("machine-missing").hidden = !missing.length;
  $("machine-missing").textContent = missing.length ? `Not measured on ${data.host || "this host"} yet: ` +
    missing.map((k) => `\`${RUN_HINT[k]}\``).join(", ") : "";
  renderP2p(data.runs.p2p);
  renderMpi(data.runs.mpi);
  renderNccl(data.runs.nccl);
  renderRuns(data.history);
}

function renderP2p(run) {
  $("p2p-note").textContent = run ? note(`run #${run.id}`, notRun(run)) : "no bench p2p run";
  const table = $("p2p-table");
  table.textContent = "";
  if (!run) return;
  const rows = run.rows;
  // matrix: copy-engine one way, the better of push and pull
  const ce = rows.filter((r) => r.benchmark === "ce_write" || r.benchmark === "ce_read");
  const gpus = [...new Set(ce.flatMap((r) => [r.src, r.dst]))].sort((a, b) => a - b);
  if (gpus.length) {
    const z = gpus.map((a) => gpus.map((b) => {
      const v = ce.filter((r) => r.src === a && r.dst === b).map((r) => r.bandwidth_GBps);
      return v.length ? Math.max(...v) : null;
    }));
    const top = Math.max(...z.flat().filter((v) => v !== null));
    plot("p2p-matrix", [{
      type: "heatmap", z, x: gpus.map((g) => `GPU${g}`), y: gpus.map((g) => `GPU${g}`), xgap: 2, ygap: 2,
      colorscale: [[0, "#eef4fb"], [1, "#08306b"]], zmin: 0, zmax: top, texttemplate: "%{z:.1f}",
      hovertemplate: "%{y} → %{x}: %{z:.2f} GB/s<extra></extra>", colorbar: { title: { text: "GB/s", side: "right" }, thickness: 12 },
    }], plotLayout({ xaxis: { title: { text: "destination" } }, yaxis: { title: { text: "source" }, autorange: "reversed" } }));
  } else {
    showPlotError("p2p-matrix", "No GPU pair was measured (one GPU, or no peer access): see the run's note.");
  }
  const t = el("table", { class: "figures" });
  const head = el("tr");
  for (const c of ["figure", "from", "to", "size", "value"]) head.append(el("th", {}, c));
  t.append(head);
  for (const r of rows) {
    const tr = el("tr");
    const value = r.latency_us !== undefined ? `${r.latency_us.toFixed(3)} µs`
      : `${r.bandwidth_GBps.toFixed(2)} GB/s${r.total_GBps !== undefined ? ` (total ${r.total_GBps.toFixed(1)})` : ""}`;
    for (const c of [P2P_LABELS[r.benchmark] || r.benchmark, where(r.src), where(r.dst), sizeLabel(r.size), value])
      tr.append(el("td", {}, c));
    t.append(tr);
  }
  table.append(t);
}

function bySize(rows, bench, key) {
  const traces = [];
  for (const buf of ["host", "device", "device-staged", "device-ipc"]) {
    const mine = rows.filter((r) => r.benchmark === bench && r.buffer === buf && r[key] !== undefined).sort((a, b) => a.size - b.size);
    if (!mine.length) continue;
    traces.push({ type: "scatter", mode: "lines+markers", name: buf, x: mine.map((r) => r.size), y: mine.map((r) => r[key]),
      line: { color: BUFFER_COLOURS[buf] }, text: mine.map((r) => sizeLabel(r.size)),
      hovertemplate: `${buf} %{text}: %{y:.3f}<extra></extra>` });
  }
  return traces;
}

function renderMpi(run) {
  $("mpi-note").textContent = run ? note(`run #${run.id}`, (run.machine && run.machine.mpi || "").split(",")[0],
    `CUDA-aware: ${run.machine && run.machine.cuda_aware ? "yes" : "no"}`, notRun(run)) : "";
  if (!run) return;
  const axis = (traces, t) => plotLayout({ xaxis: sizeAxis(traces.flatMap((r) => r.x), "message size"),
    yaxis: valueAxis(traces.flatMap((r) => r.y), t) });
  const lat = bySize(run.rows, "latency", "latency_us");
  if (lat.length) plot("mpi-latency", lat, axis(lat, "µs (half round trip)"));
  else showPlotError("mpi-latency", "No latency figures in this run.");
  const bw = bySize(run.rows, "bw", "bandwidth_GBps");
  if (bw.length) plot("mpi-bw", bw, axis(bw, "GB/s"));
  else showPlotError("mpi-bw", "No bandwidth figures in this run.");
}

function renderNccl(run) {
  const sel = $("nccl-op");
  $("nccl-note").textContent = run ? note(`run #${run.id}`, `NCCL ${run.machine && run.machine.nccl_version || "?"}`,
    run.machine && run.machine.ranks ? count(run.machine.ranks, "rank") : "", notRun(run)) : "";
  if (!run) return;
  const ops = [...new Set(run.rows.map((r) => r.benchmark))];
  const keep = ops.includes(sel.value) ? sel.value : ops[0];
  sel.textContent = "";
  for (const o of ops) sel.append(el("option", { value: o }, o));
  sel.value = keep;
  const mine = run.rows.filter((r) => r.benchmark === keep);
  const traces = [];
  for (const key of [...new Set(mine.map((r) => `${r.library} ${r.buffer}`))]) {
    const rs = mine.filter((r) => `${r.library} ${r.buffer}` === key).sort((a, b) => a.size - b.size);
    traces.push({ type: "scatter", mode: "lines+markers", name: key, x: rs.map((r) => r.size), y: rs.map((r) => r.busbw_GBps),
      text: rs.map((r) => `${sizeLabel(r.size)}: ${r.latency_us.toFixed(1)} µs, algbw ${r.algbw_GBps.toFixed(2)}`),
      hovertemplate: `${key} %{text}, busbw %{y:.2f} GB/s<extra></extra>` });
  }
  plot("nccl-busbw", traces, plotLayout({ xaxis: sizeAxis(mine.map((r) => r.size), "size (nccl-tests' definition)"),
    yaxis: { title: { text: "busbw GB/s" }, rangemode: "tozero" } }));
}

function renderRuns(history) {
  const box = $("bench-runs");
  box.textContent = "";
  const ul = el("ul", { class: "runs" });
  for (const r of history) {
    const li = el("li");
    li.append(el("b", {}, `#${r.id} ${r.kind}`), document.createTextNode(` · ${new Date(r.created).toLocaleString()} · measured ${(r.ran || []).join(", ") || "nothing"}`));
    if (r.not_run && r.not_run.length) li.append(el("div", { class: "not-run" }, `not measured: ${r.not_run.join("; ")}`));
    ul.append(li);
  }
  box.append(ul);
}

// The page's own controls: the host, and the collective whose figures are drawn.
export function wireMachine() {
  $("machine-host").addEventListener("change", () => { machineState.host = $("machine-host").value; loadMachine(); });
  $("nccl-op").addEventListener("change", () => renderNccl(machineState.data && machineState.data.runs.nccl));
}
