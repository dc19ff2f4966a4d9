// floodgate's dashboard. Polls v1/stats every second (counters turned into
// rates between two polls), draws the service's own history from
// v1/stats/history every 10 seconds as SVG charts with time axes, lists
// tracked policies' top keys from the admin endpoint v1/keys, and draws a
// key's usage series from v1/keys/KEY/usage when it is clicked. Every text
// is written with textContent: policy names and keys are shown, never
// interpreted. No storage, no cookie: the admin token lives in memory.
"use strict";

const POLL_MS = 1000;
const HISTORY_MS = 10000;
const KEYS_MS = 5000;
const RANGES = { "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
const SVG = "http://www.w3.org/2000/svg"; // the SVG namespace's name, never fetched

let prev = null;            // the previous stats answer
let token = "";             // the admin token: in memory only
let failureMode = "";       // the failure mode in force, as v1/stats says
let range = "1h";           // the history's range, kept in the URL's fragment
let lastHistory = null;     // the last history answer, redrawn on resize
const keyViews = new Map(); // tracked policy name -> {sort, tbody, status, box}
let trackedNames = "";
let drill = null;           // the open drill-down: {policy, key, panel, ...}

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  setProps(e, props);
  for (const c of children) e.append(c);
  return e;
}

function svg(tag, props, ...children) {
  const e = document.createElementNS(SVG, tag);
  setProps(e, props);
  for (const c of children) e.append(c);
  return e;
}

function setProps(e, props) {
  if (!props) return;
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.setAttribute("class", v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
}

function num(n) {
  return n == null ? "—" : Number(n).toLocaleString("en-US");
}

function rate(r) {
  if (r == null) return "—";
  return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
}

function secs(s) {
  if (s == null) return "—";
  if (s === 0) return "0";
  if (s < 1e-3) return +(s * 1e6).toPrecision(3) + " µs";
  if (s < 1) return +(s * 1e3).toPrecision(3) + " ms";
  return +s.toPrecision(3) + " s";
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d > 0) return `${d}d ${h}h ${m}m`;
  if (h > 0) return `${h}h ${m}m ${s % 60}s`;
  if (m > 0) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

// span writes a whole number of seconds in its largest exact unit: 10 s,
// 2 min, 24 h.
function span(s) {
  if (s >= 3600 && s % 3600 === 0) return s / 3600 + " h";
  if (s >= 60 && s % 60 === 0) return s / 60 + " min";
  return s + " s";
}

function when(iso, now) {
  if (!iso) return "—";
  const t = new Date(iso);
  const ago = (now - t) / 1000;
  return `${t.toLocaleString()} (${ago < 1 ? "just now" : duration(ago) + " ago"})`;
}

function clock(ms, withSeconds) {
  const o = { hour: "2-digit", minute: "2-digit", hour12: false };
  if (withSeconds) o.second = "2-digit";
  return new Date(ms).toLocaleTimeString([], o);
}

// request fetches a JSON answer of this service, relative to the page,
// with the admin token when one is given. It resolves to {res, body}; body
// is null when the answer is not JSON.
async function request(path) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const res = await fetch(path, { headers, cache: "no-store", credentials: "same-origin" });
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = null;
  }
  return { res, body };
}

function errorText(res, body) {
  const msg = (body && body.error && body.error.message) || "HTTP " + res.status;
  if (res.status === 401 || res.status === 403) return msg + "; type the admin token above";
  return msg;
}

// perSecond is the rate of a counter between two answers; null when there
// is no earlier value or the counter went down (a restart).
function perSecond(cur, old, dt) {
  if (old == null || dt <= 0 || cur < old) return null;
  return (cur - old) / dt;
}

// quantile mirrors the server's: linear within the bucket holding the
// rank of cumulative buckets [{le, count}].
function quantile(q, buckets, count) {
  if (!count || !buckets.length) return null;
  const rank = q * count;
  let lower = 0, below = 0;
  for (const b of buckets) {
    if (b.count >= rank) {
      const inside = b.count - below;
      return inside > 0 ? lower + (b.le - lower) * (rank - below) / inside : lower;
    }
    lower = b.le;
    below = b.count;
  }
  return buckets[buckets.length - 1].le;
}

// ---- Charts: hand-written SVG with a time axis and a value axis. ----

// niceStep is a round step (1, 2, 2.5 or 5 times a power of ten) that
// cuts span into about n parts.
function niceStep(span, n) {
  const raw = span / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

const TIME_TICKS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200].map((s) => s * 1000);

// chart draws into fig a line chart of series [{label, cls, values}] over
// the points at xs (ms), on a time axis from..to (ms). format writes a
// value with its unit. The figure keeps data-points per series (the
// points drawn) for tests, and a readout of the point under the pointer.
function chart(fig, { from, to, xs, series, format, unit }) {
  const plot = fig.querySelector(".plot");
  const width = Math.max(240, Math.floor(plot.clientWidth || 320));
  const height = 170;
  const m = { left: 58, right: 10, top: 10, bottom: 24 };
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  let top = 0;
  for (const s of series) for (const v of s.values) if (v != null && v > top) top = v;
  const ystep = top > 0 ? niceStep(top, 4) : 1;
  top = top > 0 ? Math.ceil(top / ystep) * ystep : ystep * 4;
  const x = (t) => m.left + ((t - from) / Math.max(1, to - from)) * w;
  const y = (v) => m.top + h - (v / top) * h;

  const root = svg("svg", { width: String(width), height: String(height), viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": unit });
  const grid = svg("g", { class: "grid" });
  for (let v = 0; v <= top + ystep / 2; v += ystep) {
    grid.append(svg("line", { x1: String(m.left), x2: String(m.left + w), y1: String(y(v)), y2: String(y(v)) }));
    grid.append(svg("text", { x: String(m.left - 6), y: String(y(v) + 4), "text-anchor": "end", text: format(v) }));
  }
  const tz = -new Date(from).getTimezoneOffset() * 60000;
  const tick = TIME_TICKS.find((s) => (to - from) / s <= Math.max(2, w / 75)) || TIME_TICKS[TIME_TICKS.length - 1];
  for (let t = Math.ceil((from + tz) / tick) * tick - tz; t <= to; t += tick) {
    grid.append(svg("line", { class: "tick", x1: String(x(t)), x2: String(x(t)), y1: String(m.top), y2: String(m.top + h) }));
    grid.append(svg("text", { x: String(x(t)), y: String(height - 6), "text-anchor": "middle", text: clock(t, tick < 60000) }));
  }
  grid.append(svg("line", { class: "axis", x1: String(m.left), x2: String(m.left + w), y1: String(y(0)), y2: String(y(0)) }));
  root.append(grid);

  for (const s of series) {
    let d = "", pen = false, n = 0;
    s.values.forEach((v, i) => {
      if (v == null) {
        pen = false;
        return;
      }
      const px = x(xs[i]).toFixed(1), py = y(v).toFixed(1);
      // A point alone is a zero-length line: its round caps make a dot.
      d += pen ? ` L${px} ${py}` : ` M${px} ${py} l0 0`;
      pen = true;
      n++;
    });
    root.append(svg("path", { class: "series " + s.cls, d: d.trim() || "M0 0", "data-points": String(n) }));
  }
  const cursor = svg("line", { class: "cursor", x1: "0", x2: "0", y1: String(m.top), y2: String(m.top + h), visibility: "hidden" });
  root.append(cursor);

  const readout = el("p", { class: "readout" });
  const show = (i) => {
    if (i < 0) {
      readout.textContent = "no data in this range yet";
      cursor.setAttribute("visibility", "hidden");
      return;
    }
    readout.replaceChildren(el("span", { class: "at", text: clock(xs[i], true) }));
    for (const s of series) {
      readout.append(el("span", { class: "swatch " + s.cls }), el("span", { text: `${s.label} ${s.values[i] == null ? "—" : format(s.values[i])}` }));
    }
  };
  const latest = () => {
    for (let i = xs.length - 1; i >= 0; i--) if (series.some((s) => s.values[i] != null)) return i;
    return -1;
  };
  root.addEventListener("pointermove", (e) => {
    const r = root.getBoundingClientRect();
    const t = from + ((e.clientX - r.left - m.left) / w) * (to - from);
    let best = -1;
    xs.forEach((xt, i) => {
      if (best < 0 || Math.abs(xt - t) < Math.abs(xs[best] - t)) best = i;
    });
    if (best < 0) return;
    cursor.setAttribute("x1", String(x(xs[best])));
    cursor.setAttribute("x2", String(x(xs[best])));
    cursor.setAttribute("visibility", "visible");
    show(best);
  });
  root.addEventListener("pointerleave", () => {
    cursor.setAttribute("visibility", "hidden");
    show(latest());
  });
  show(latest());
  cursor.setAttribute("visibility", "hidden");

  const legend = el("div", { class: "legend" });
  for (const s of series) legend.append(el("span", { class: "swatch " + s.cls }), el("span", { text: s.label }));
  legend.append(el("span", { class: "unit", text: unit }));
  plot.replaceChildren(legend, root, readout);
}

// figure returns the chart figure of id in box, or a new one: a title, a
// subtitle, the plot, and a line of totals.
function figure(box, id, title) {
  return box.querySelector(`figure[data-id="${CSS.escape(id)}"]`) ||
    el("figure", { class: "chart", "data-id": id },
      el("figcaption", null, el("span", { class: "title", text: title }), el("span", { class: "sub" })),
      el("div", { class: "plot" }),
      el("p", { class: "totals note" }));
}

// ---- History: v1/stats/history. ----

let historySeq = 0; // the latest history request: an older answer is dropped

async function loadHistory() {
  const note = $("history-note");
  const seq = ++historySeq;
  try {
    const { res, body } = await request("v1/stats/history?" + new URLSearchParams({ from: "-" + range }));
    if (seq !== historySeq) return;
    if (!res.ok) {
      note.textContent = res.status === 404 ? "This service keeps no history (v1/stats/history is not served)." : "Cannot read the history: " + errorText(res, body);
      note.className = "note bad";
      return;
    }
    lastHistory = body;
    note.textContent = `Kept by the service itself (GET /v1/stats/history), per process since ${new Date(body.recording_since).toLocaleString()}: ` +
      `${span(body.resolution_seconds)} resolution for the last ${span(body.retention_seconds)}, shown in steps of ${span(body.step_seconds)}; ` +
      `${num(body.bytes)} bytes in memory. Read every 10 seconds.`;
    note.className = "note";
    renderHistory(body);
  } catch (e) {
    if (seq !== historySeq) return;
    note.textContent = "Cannot read the history: " + e.message;
    note.className = "note bad";
  }
}

// midpoints places each step's point in the middle of the part of it that
// was recorded: the end of the first step when recording began inside it,
// the start of the step in progress; within the range's ends.
function midpoints(hb) {
  const step = hb.step_seconds * 1000, from = Date.parse(hb.from), to = Date.parse(hb.to);
  return hb.times.map((iso, i) => {
    const t = Date.parse(iso), covered = hb.seconds[i] * 1000;
    let x = t + step / 2;
    if (covered < step) x = (i === hb.times.length - 1 ? Math.min(t + step, to) : t + step) - covered / 2;
    return Math.min(Math.max(x, from), to);
  });
}

function renderHistory(hb) {
  const box = $("charts");
  const from = Date.parse(hb.from), to = Date.parse(hb.to);
  const xs = midpoints(hb);
  const perSec = (counts) => counts.map((c, i) => (hb.seconds[i] > 0 ? c / hb.seconds[i] : null));
  const sum = (a) => a.reduce((s, v) => s + v, 0);
  const mode = hb.store.failure_mode || failureMode;
  const charts = []; // [figure, its chart's options, its subtitle, its totals]

  charts.push([figure(box, "store-latency", "store latency"), {
    format: secs, unit: "seconds per call",
    series: [{ label: "p50", cls: "s-p50", values: hb.store.p50_seconds }, { label: "p99", cls: "s-p99", values: hb.store.p99_seconds }],
  }, hb.store.type + " store, every call", `${num(sum(hb.store.calls))} calls, ${num(sum(hb.store.errors))} failed, in the range`]);
  charts.push([figure(box, "store-calls", "store calls"), {
    format: (v) => rate(v) + "/s", unit: "per second",
    series: [{ label: "calls", cls: "s-calls", values: perSec(hb.store.calls) }, { label: "failed", cls: "s-denied", values: perSec(hb.store.errors) }],
  }, "calls, and failures (timeouts, errors, breaker open)", `when the store fails: fail ${mode}`]);

  const policies = hb.policies.slice();
  if (hb.overflow) policies.push({ ...hb.overflow, name: `other policies (past ${hb.max_policies})` });
  for (const p of policies) {
    const kind = p.kind === "rule" ? "Envoy rule" : p.kind === "" ? "no longer configured" : p.kind === "overflow" ? "counted together" : "";
    charts.push([figure(box, "policy:" + p.name, p.name), {
      format: (v) => rate(v) + "/s", unit: "decisions per second",
      series: [
        { label: "allowed", cls: "s-allowed", values: perSec(p.allowed) },
        { label: "denied", cls: "s-denied", values: perSec(p.denied) },
        { label: `degraded (fail ${mode})`, cls: "s-degraded", values: perSec(p.degraded) },
      ],
    }, [kind, p.text].filter(Boolean).join(": "),
    `in the range: ${num(sum(p.allowed))} allowed, ${num(sum(p.denied))} denied, ${num(sum(p.degraded))} degraded (decided by the failure mode, fail ${mode})`]);
  }
  box.replaceChildren(...charts.map((c) => c[0]));
  for (const [fig, opts, sub, totals] of charts) {
    fig.querySelector(".sub").textContent = sub;
    fig.querySelector(".totals").textContent = totals;
    chart(fig, { from, to, xs, ...opts });
  }
}

function setRange(r) {
  if (!RANGES[r]) r = "1h";
  range = r;
  for (const b of document.querySelectorAll("[data-range]")) b.setAttribute("aria-pressed", String(b.dataset.range === r));
  if (location.hash !== "#range=" + r) history.replaceState(null, "", "#range=" + r);
  loadHistory();
}

// ---- Stats: v1/stats. ----

function render(s) {
  const now = new Date(s.time);
  const dt = prev ? (now - new Date(prev.time)) / 1000 : 0;
  failureMode = s.store.failure_mode;

  const ready = $("ready");
  ready.textContent = s.store.ready ? "ready" : "not ready";
  ready.className = "pill " + (s.store.ready ? "ok" : "bad");
  ready.title = s.store.error || "";
  $("version").textContent = s.version || "unknown";
  $("uptime").textContent = duration(s.uptime_seconds);
  $("store").textContent = s.store.type + (s.store.ready ? "" : ": " + s.store.error);
  const open = (s.store.open_breakers || []).map((b) => b.node);
  $("failure-mode").textContent = "fail " + s.store.failure_mode + (open.length ? " (breaker open: " + open.join(", ") + ")" : "");
  $("degraded-head").textContent = "degraded (fail " + s.store.failure_mode + ")";
  $("updated").textContent = now.toLocaleTimeString();

  const c = s.config;
  $("sources").textContent = c.sources.length ? c.sources.join(", ") : "—";
  $("applied").textContent = when(c.applied_at, now);
  const reload = $("reload");
  if (c.last_reload) {
    reload.textContent = `${c.last_reload.outcome}, ${when(c.last_reload.at, now)}`;
    reload.className = c.last_reload.outcome === "applied" ? "ok" : "bad";
  } else {
    reload.textContent = "none since start";
    reload.className = "";
  }
  $("reloads").textContent = `${num(c.reloads_applied)} applied, ${num(c.reloads_rejected)} rejected`;

  renderPolicies(s, dt);
  renderStoreCalls(s, dt);
  renderStoreNodes(s);
  setupKeys(s.policies.filter((p) => p.track).map((p) => p.name));
}

function renderPolicies(s, dt) {
  const old = new Map((prev ? prev.policies : []).map((p) => [p.name, p]));
  const rows = s.policies.map((p) => {
    const o = old.get(p.name);
    const name = el("td", null, el("span", { text: p.name }));
    if (p.kind !== "policy") {
      name.append(el("span", { class: "kind", text: p.kind === "rule" ? "Envoy rule" : "no longer configured" }));
    }
    if (p.shadow_mode) name.append(el("span", { class: "kind", text: "shadow" }));
    if (p.track) name.append(el("span", { class: "kind", text: "tracked" }));
    return el("tr", null,
      name,
      el("td", { class: "text", text: p.text || "—" }),
      el("td", { class: "num allowed", text: rate(perSecond(p.allowed, o && o.allowed, dt)) }),
      el("td", { class: "num denied", text: rate(perSecond(p.denied, o && o.denied, dt)) }),
      el("td", { class: "num", text: num(p.allowed) }),
      el("td", { class: "num", text: num(p.denied) }),
      el("td", { class: "num" + (p.shadow_denials ? " warn" : ""), text: num(p.shadow_denials) }),
      el("td", { class: "num" + (p.degraded ? " bad" : ""), text: num(p.degraded) }),
      el("td", { class: "num", text: num(p.over_limit_cache_hits) }));
  });
  $("policies").tBodies[0].replaceChildren(...rows);
}

function renderStoreCalls(s, dt) {
  const old = new Map((prev ? prev.store_calls : []).map((c) => [c.op, c]));
  const rows = s.store_calls.map((c) => {
    const o = old.get(c.op);
    let calls = null, p50 = null, p99 = null, mean = null;
    if (o && dt > 0 && c.count >= o.count) {
      const n = c.count - o.count;
      calls = n / dt;
      if (n > 0 && o.buckets.length === c.buckets.length) {
        const delta = c.buckets.map((b, i) => ({ le: b.le, count: b.count - o.buckets[i].count }));
        p50 = quantile(0.5, delta, n);
        p99 = quantile(0.99, delta, n);
        mean = (c.sum_seconds - o.sum_seconds) / n;
      }
    }
    const causes = Object.entries(c.errors_by_cause).map(([k, v]) => `${k} ${num(v)}`).join(", ");
    return el("tr", null,
      el("td", { text: c.op }),
      el("td", { class: "num", text: rate(calls) }),
      el("td", { class: "num", text: secs(p50) }),
      el("td", { class: "num", text: secs(p99) }),
      el("td", { class: "num", text: secs(mean) }),
      el("td", { class: "num", text: secs(c.p50_seconds) }),
      el("td", { class: "num", text: secs(c.p99_seconds) }),
      el("td", { class: "num", text: num(c.count) }),
      el("td", { class: "num" + (c.errors ? " bad" : ""), text: num(c.errors) }),
      el("td", { text: causes || "—" }));
  });
  if (!rows.length) rows.push(el("tr", null, el("td", { colspan: "10", class: "note", text: "No store call yet." })));
  $("store-calls").tBodies[0].replaceChildren(...rows);
}

// renderStoreNodes lists store.links: one row per node that decisions
// went to lately, with its distance as the batcher judges it.
function renderStoreNodes(s) {
  const links = s.store.links || [];
  const rows = links.map((l) => el("tr", { "data-node": l.node },
    el("td", { text: l.node }),
    el("td", { text: l.far ? "far" : "near" }),
    el("td", { class: "num", text: l.round_trip_seconds == null ? "not yet timed" : secs(l.round_trip_seconds) }),
    el("td", { class: "num", text: num(l.batches_in_flight) })));
  if (!rows.length) {
    const why = s.store.type === "memory"
      ? "The memory store decides in this process: it has no node."
      : "No node lately: a node is listed once decisions go to it, with store.batching on.";
    rows.push(el("tr", null, el("td", { colspan: "4", class: "note", text: why })));
  }
  $("store-nodes").tBodies[0].replaceChildren(...rows);
}

// ---- Top keys: v1/keys, and a key's usage: v1/keys/KEY/usage. ----

// setupKeys builds one table per tracked policy, once per set of names.
function setupKeys(names) {
  const key = names.join("\n");
  if (key === trackedNames) return;
  trackedNames = key;
  const box = $("keys");
  keyViews.clear();
  closeDrill();
  if (!names.length) {
    box.replaceChildren(el("p", { class: "note" }, "No policy has ", el("code", { text: "track" }), "."));
    return;
  }
  const sections = names.map((name) => {
    const sort = el("select", { "aria-label": "sort " + name });
    for (const o of ["requests", "denied", "last_seen"]) sort.append(el("option", { value: o, text: "by " + o.replace("_", " ") }));
    const status = el("span", { class: "note" });
    const tbody = el("tbody");
    const view = el("div", { class: "key-view", "data-policy": name },
      el("div", { class: "keys-head" }, el("h3", { text: name }), sort, status),
      el("div", { class: "scroll" }, el("table", null,
        el("thead", null, el("tr", null,
          el("th", { text: "key" }), el("th", { class: "num", text: "requests" }),
          el("th", { class: "num", text: "denied" }), el("th", { text: "last seen" }), el("th", { text: "first seen" }))),
        tbody)));
    const v = { sort, tbody, status, box: view };
    keyViews.set(name, v);
    sort.addEventListener("change", () => loadKeys(name, v));
    return view;
  });
  box.replaceChildren(...sections);
  loadAllKeys();
}

async function loadKeys(name, view) {
  const q = new URLSearchParams({ policy: name, sort: view.sort.value, limit: "10" });
  try {
    const { res, body } = await request("v1/keys?" + q);
    if (!res.ok) {
      view.status.textContent = errorText(res, body);
      view.status.className = "note bad";
      view.tbody.replaceChildren();
      return;
    }
    const now = new Date();
    view.status.textContent = `${body.keys.length} shown`;
    view.status.className = "note";
    const rows = body.keys.map((k) => {
      const open = el("button", { type: "button", class: "key-link", title: "usage of " + k.key + " over the last hour", text: k.key });
      open.addEventListener("click", () => openDrill(name, k.key));
      return el("tr", null,
        el("td", { class: "key" }, open),
        el("td", { class: "num", text: num(k.requests) }),
        el("td", { class: "num" + (k.denied ? " denied" : ""), text: num(k.denied) }),
        el("td", { text: when(k.last_seen, now) }),
        el("td", { text: new Date(k.first_seen).toLocaleString() }));
    });
    if (!rows.length) rows.push(el("tr", null, el("td", { colspan: "5", class: "note", text: "No key yet." })));
    view.tbody.replaceChildren(...rows);
  } catch (e) {
    view.status.textContent = "cannot list keys: " + e.message;
    view.status.className = "note bad";
  }
}

function loadAllKeys() {
  for (const [name, view] of keyViews) loadKeys(name, view);
}

function openDrill(policy, key) {
  closeDrill();
  const view = keyViews.get(policy);
  if (!view) return;
  const close = el("button", { type: "button", class: "close", text: "Close" });
  close.addEventListener("click", closeDrill);
  const fig = figure(view.box, "drill", key);
  fig.querySelector(".sub").textContent = `${policy}, the last hour per minute`;
  const status = el("p", { class: "note" }, "loading…");
  const panel = el("div", { id: "drill", class: "drill" }, el("div", { class: "keys-head" }, el("h3", { text: "Usage of a key" }), close), status, fig);
  view.box.append(panel);
  drill = { policy, key, panel, fig, status };
  loadDrill();
}

function closeDrill() {
  if (drill) drill.panel.remove();
  drill = null;
}

async function loadDrill() {
  const d = drill;
  if (!d) return;
  const path = "v1/keys/" + encodeURIComponent(d.key) + "/usage?" + new URLSearchParams({ policy: d.policy, from: "-1h", step: "1m" });
  try {
    const { res, body } = await request(path);
    if (drill !== d) return;
    if (res.status === 404) {
      d.status.replaceChildren("No series for this policy: track it with ", el("code", { text: "track 1m for 24h" }),
        body && body.error && body.error.code !== "not_found" ? " (" + body.error.message + ")" : ".");
      d.status.className = "note warn";
      d.fig.hidden = true;
      return;
    }
    if (!res.ok) {
      d.status.textContent = "Cannot read the key's usage: " + errorText(res, body);
      d.status.className = "note bad";
      d.fig.hidden = true;
      return;
    }
    d.fig.hidden = false;
    const step = body.step_us / 1e6;
    const xs = body.points.map((p) => Date.parse(p.t) + (step * 1000) / 2);
    const per = "per " + (step === 60 ? "minute" : span(step));
    d.fig.querySelector(".sub").textContent = `${body.policy}, ${per}, from ${clock(Date.parse(body.from))} to ${clock(Date.parse(body.to))}`;
    chart(d.fig, {
      from: Date.parse(body.from), to: Date.parse(body.to), xs, format: (v) => num(Math.round(v * 100) / 100), unit: "requests " + per,
      series: [
        { label: "requests", cls: "s-allowed", values: body.points.map((p) => p.requests) },
        { label: "denied", cls: "s-denied", values: body.points.map((p) => p.denied) },
      ],
    });
    const line = (name, s) => `${name}: ${num(s.sum)} in all, ${rate(s.mean)} ${per} on average, peak ${num(s.peak)}` +
      (s.peak && s.peak_at ? ` at ${clock(Date.parse(s.peak_at))}` : "");
    d.fig.querySelector(".totals").textContent = line("requests", body.requests) + "; " + line("denied", body.denied);
    d.status.textContent = "";
    d.status.className = "note";
  } catch (e) {
    if (drill !== d) return;
    d.status.textContent = "Cannot read the key's usage: " + e.message;
    d.status.className = "note bad";
  }
}

// ---- Loops. ----

async function poll() {
  try {
    const { res, body } = await request("v1/stats");
    if (!res.ok) throw new Error(errorText(res, body));
    render(body);
    prev = body;
    $("problem").hidden = true;
  } catch (e) {
    const p = $("problem");
    p.textContent = "Cannot read v1/stats (" + e.message + "); showing the last figures. Retrying every second.";
    p.hidden = false;
  }
  setTimeout(poll, POLL_MS);
}

function useToken() {
  token = $("token").value;
  $("token").value = "";
  $("token-state").textContent = token ? "token in use (memory only)" : "no token";
  loadAllKeys();
  loadHistory();
  loadDrill();
}

let resizeTimer = 0;
document.addEventListener("DOMContentLoaded", () => {
  $("use-token").addEventListener("click", useToken);
  $("token").addEventListener("keydown", (e) => { if (e.key === "Enter") useToken(); });
  $("forget-token").addEventListener("click", () => { $("token").value = ""; useToken(); });
  for (const b of document.querySelectorAll("[data-range]")) b.addEventListener("click", () => setRange(b.dataset.range));
  window.addEventListener("hashchange", () => setRange(location.hash.replace(/^#range=/, "")));
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (lastHistory) renderHistory(lastHistory); }, 150);
  });
  setRange(location.hash.replace(/^#range=/, ""));
  poll();
  setInterval(loadAllKeys, KEYS_MS);
  setInterval(() => { loadHistory(); loadDrill(); }, HISTORY_MS);
});
