// The sluice dashboard: polls the REST API once a second and draws the job.
// Plain JavaScript, no build step, nothing loaded from elsewhere. Every name from the job is
// put into the page as text (never as HTML). Elements carry data attributes (data-vertex,
// data-operator, data-rate, data-backpressure, data-checkpoint, ...) for tools that read the page.
"use strict";

const POLL_MS = 1000;
const BOX_W = 240;
const COL_GAP = 90;
const ROW_GAP = 28;
const PAD = 20;

let currentJob = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

function rate(x) {
  if (x === null || x === undefined) return "–";
  if (x >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (x >= 1e3) return (x / 1e3).toFixed(1) + "k";
  return x.toFixed(x < 10 ? 1 : 0);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function ms(d) {
  if (d === null || d === undefined || d < 0) return "–";
  if (d < 1000) return d + " ms";
  if (d < 60000) return (d / 1000).toFixed(1) + " s";
  const s = Math.floor(d / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return (h ? h + " h " : "") + m + " min " + (s % 60) + " s";
}

function clock(t) {
  return t && t > 0 ? new Date(t).toLocaleTimeString() : "–";
}

// Columns by longest path from the sources; rows in plan order within a column.
function layout(job) {
  const ids = job.vertices.map(v => v.id);
  const inputs = {};
  for (const n of job.plan.nodes) inputs[n.id] = n.inputs.map(i => i.id);
  const level = {};
  for (const id of ids) level[id] = 0;
  for (let pass = 0; pass < ids.length; pass++) {
    let changed = false;
    for (const id of ids) {
      for (const src of inputs[id] || []) {
        if (level[src] !== undefined && level[src] + 1 > level[id]) { level[id] = level[src] + 1; changed = true; }
      }
    }
    if (!changed) break;
  }
  const rows = {};
  const pos = {};
  for (const v of job.vertices) {
    const col = level[v.id];
    const row = rows[col] || 0;
    pos[v.id] = { col, row, x: PAD + col * (BOX_W + COL_GAP), y: PAD, height: 0 };
    rows[col] = row + 1;
  }
  const width = PAD * 2 + (Math.max(0, ...Object.values(level)) + 1) * (BOX_W + COL_GAP) - COL_GAP;
  return { pos, width };
}

// Rows are as tall as the tallest box drawn in them, in any column.
function placeRows(pos) {
  const rowHeight = {};
  for (const p of Object.values(pos)) rowHeight[p.row] = Math.max(rowHeight[p.row] || 0, p.height);
  const rowTop = {};
  let top = PAD;
  for (let r = 0; r in rowHeight; r++) { rowTop[r] = top; top += rowHeight[r] + ROW_GAP; }
  for (const p of Object.values(pos)) p.y = rowTop[p.row];
  return top - ROW_GAP + PAD;
}

// An operator of a chain: its busy and backpressured shares, and a mark on the one its chain
// waits on (an async operator with every request slot taken), which reads busy while what feeds
// it reads backpressured.
function operatorItem(o, known) {
  const m = o.metrics || {};
  const busy = m["busy-ratio"], bp = m["backpressure-ratio"];
  const holds = o["holds-back-chain"] === true;
  const shares = "busy " + (known(busy) ? Math.round(busy * 100) + " %" : "–") +
    " · backpressured " + (known(bp) ? Math.round(bp * 100) + " %" : "–");
  const item = el("li", {
    "data-operator": o.name,
    "data-busy-ratio": known(busy) ? busy.toFixed(3) : "",
    "data-backpressure-ratio": known(bp) ? bp.toFixed(3) : "",
    "data-holds-back-chain": holds ? "true" : "false",
    class: holds ? "holds-back" : "",
    title: o.name + ": " + shares + (holds ? " · holds its chain back" : ""),
  }, o.name);
  if (holds) item.append(el("span", { class: "holder" }, " · busy " + Math.round(busy * 100) + " %, holds the chain back"));
  return item;
}

function vertexBox(v, p) {
  const m = v.metrics;
  const level = v["backpressure-level"] || "ok";
  const perSecond = m["records-per-second"];
  const bp = m["backpressure-ratio"];
  const busy = m["busy-ratio"];
  const known = x => x !== null && x !== undefined;
  const ops = el("ul", { class: "ops" });
  for (const o of v.operators) ops.append(operatorItem(o, known));
  return el("div", {
    class: "vertex bp-" + level,
    "data-vertex": v.id,
    "data-name": v.name,
    "data-parallelism": v.parallelism,
    "data-status": v.status,
    "data-rate": known(perSecond) ? perSecond.toFixed(1) : "",
    "data-records-in": m["read-records"],
    "data-records-out": m["write-records"],
    "data-backpressure": level,
    "data-backpressure-ratio": known(bp) ? bp.toFixed(3) : "",
    style: `left:${p.x}px;top:${p.y}px`,
    title: v.name,
  },
    ops,
    el("div", { class: "rate" }, rate(perSecond) + " records/s"),
    el("div", { class: "meta" },
      "parallelism " + v.parallelism + " · " + v.status.toLowerCase() +
      " · backpressured " + (known(bp) ? Math.round(bp * 100) + " %" : "–") +
      " · busy " + (known(busy) ? Math.round(busy * 100) + " %" : "–")),
    el("div", { class: "meta" }, "in " + m["read-records"] + " · out " + m["write-records"]),
  );
}

function drawGraph(job) {
  const graph = document.getElementById("graph");
  const { pos, width } = layout(job);
  graph.setAttribute("data-sampled-at", job.rates ? job.rates["sampled-at"] : "");
  for (const old of graph.querySelectorAll(".vertex")) old.remove();
  // Boxes first, then their measured heights place the rows and the edges.
  const boxes = {};
  for (const v of job.vertices) {
    boxes[v.id] = vertexBox(v, pos[v.id]);
    graph.append(boxes[v.id]);
  }
  for (const [id, box] of Object.entries(boxes)) pos[id].height = box.offsetHeight;
  const height = placeRows(pos);
  for (const [id, box] of Object.entries(boxes)) box.style.top = pos[id].y + "px";
  graph.style.height = height + "px";
  const edges = document.getElementById("edges");
  edges.replaceChildren();
  edges.setAttribute("width", width);
  edges.setAttribute("height", height);
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8c959f" }));
  defs.append(marker);
  edges.append(defs);
  for (const n of job.plan.nodes) {
    for (const input of n.inputs) {
      const a = pos[input.id], b = pos[n.id];
      if (!a || !b) continue;
      const x1 = a.x + BOX_W, y1 = a.y + a.height / 2, x2 = b.x, y2 = b.y + b.height / 2;
      const mx = (x1 + x2) / 2;
      edges.append(svg("path", {
        d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`,
        "marker-end": "url(#arrow)",
        "data-edge": input.id + ">" + n.id,
        "data-ship-strategy": input.ship_strategy,
      }));
      const label = svg("text", { x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" });
      label.textContent = input.ship_strategy;
      edges.append(label);
    }
  }
}

function drawCheckpoints(cp) {
  const body = document.querySelector("#checkpoints tbody");
  body.replaceChildren();
  for (const c of cp.history) {
    body.append(el("tr", { "data-checkpoint": c.id, "data-status": c.status },
      el("td", {}, c.id),
      el("td", {}, c.status),
      el("td", {}, clock(c.trigger_timestamp)),
      el("td", {}, ms(c.end_to_end_duration)),
      el("td", {}, bytes(c.checkpointed_size)),
      el("td", {}, c.failure_message || ""),
    ));
  }
  if (!cp.history.length) {
    body.append(el("tr", {}, el("td", { colspan: 6 }, cp.enabled ? "No checkpoint yet." : "Checkpointing is off.")));
  }
  const n = cp.counts;
  document.getElementById("job-checkpoints").textContent =
    n.completed + " completed, " + n.failed + " failed, " + n.in_progress + " in progress";
}

function drawFailure(ex) {
  const box = document.getElementById("last-failure");
  box.setAttribute("data-exceptions", ex.total);
  const last = ex.exceptionHistory.entries[0];
  if (!last) {
    box.replaceChildren(el("p", { class: "none" }, "No failure."));
    return;
  }
  box.replaceChildren(
    el("div", { class: "meta" }, clock(last.timestamp) + (last.taskName ? " · " + last.taskName : "") +
      (ex.total > 1 ? " · " + ex.total + " failures in all" : "")),
    el("pre", { "data-exception": "last" }, last.stacktrace),
  );
}

function drawJobs(list) {
  const nav = document.getElementById("jobs");
  nav.replaceChildren();
  for (const j of list.jobs) {
    nav.append(el("a", { href: "#" + j.jid, "data-job": j.jid, class: j.jid === currentJob ? "current" : "" },
      j.name + " (" + j.state.toLowerCase() + ")"));
  }
}

function pickJob(list) {
  const wanted = location.hash.slice(1);
  if (list.jobs.some(j => j.jid === wanted)) return wanted;
  const running = list.jobs.find(j => j.state === "RUNNING" || j.state === "RESTARTING");
  return (running || list.jobs[0] || {}).jid || null;
}

async function refresh() {
  const status = document.getElementById("connection");
  try {
    const list = await get("jobs/overview");
    currentJob = pickJob(list);
    drawJobs(list);
    if (currentJob) {
      const [job, cp, ex] = await Promise.all([
        get("jobs/" + currentJob),
        get("jobs/" + currentJob + "/checkpoints"),
        get("jobs/" + currentJob + "/exceptions"),
      ]);
      document.title = job.name + " · sluice";
      document.getElementById("job-name").textContent = job.name;
      const state = document.getElementById("job-state");
      state.textContent = job.state;
      state.setAttribute("data-state", job.state);
      document.getElementById("job-id").textContent = job.jid;
      document.getElementById("job-duration").textContent = ms(job.duration);
      document.getElementById("job-restarts").textContent = job.restarts;
      drawGraph(job);
      drawCheckpoints(cp);
      drawFailure(ex);
    }
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.setAttribute("data-connected", "true");
  } catch (e) {
    status.textContent = "cannot reach the job: " + e.message;
    status.setAttribute("data-connected", "false");
  }
  setTimeout(refresh, POLL_MS);
}

window.addEventListener("hashchange", () => { currentJob = location.hash.slice(1); });
refresh();
