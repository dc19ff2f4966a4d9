// floodgate's dashboard: polls v1/stats every second and turns its
// cumulative counters into rates; lists tracked policies' top keys from
// v1/keys. Both are admin endpoints: the page sends the admin token typed
// into it (kept in memory only), as a same-origin request. Everything is
// written with textContent: policy names and keys are shown, never
// interpreted.
"use strict";

const POLL_MS = 1000;
const KEYS_MS = 5000;
const HISTORY = 60; // points of the per-policy sparkline

let prev = null;         // the previous stats answer
let token = "";          // the admin token: in memory only
const history = new Map(); // policy name -> [{allowed, denied}] rates
const keyViews = new Map(); // tracked policy name -> {sort, tbody, status}
let trackedNames = "";

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
  }
  for (const c of children) e.append(c);
  return e;
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
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}

function duration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d > 0) return `${d}d ${h}h ${m}m`;
  if (h > 0) return `${h}h ${m}m ${s % 60}s`;
  if (m > 0) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

function when(iso, now) {
  if (!iso) return "—";
  const t = new Date(iso);
  const ago = (now - t) / 1000;
  return `${t.toLocaleString()} (${ago < 1 ? "just now" : duration(ago) + " ago"})`;
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

function render(s) {
  const now = new Date(s.time);
  const dt = prev ? (now - new Date(prev.time)) / 1000 : 0;

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
  setupKeys(s.policies.filter((p) => p.track).map((p) => p.name));
}

function renderPolicies(s, dt) {
  const old = new Map((prev ? prev.policies : []).map((p) => [p.name, p]));
  const rows = [];
  const seen = new Set();
  for (const p of s.policies) {
    seen.add(p.name);
    const o = old.get(p.name);
    const a = perSecond(p.allowed, o && o.allowed, dt);
    const d = perSecond(p.denied, o && o.denied, dt);
    const h = history.get(p.name) || [];
    if (prev) h.push({ allowed: a || 0, denied: d || 0 });
    while (h.length > HISTORY) h.shift();
    history.set(p.name, h);

    const name = el("td", null, el("span", { text: p.name }));
    if (p.kind !== "policy") {
      name.append(el("span", { class: "kind", text: p.kind === "rule" ? "Envoy rule" : "no longer configured" }));
    }
    if (p.shadow_mode) name.append(el("span", { class: "kind", text: "shadow" }));
    if (p.track) name.append(el("span", { class: "kind", text: "tracked" }));
    const spark = el("canvas", { width: "120", height: "24" });
    drawSpark(spark, h);
    rows.push(el("tr", null,
      name,
      el("td", { class: "text", text: p.text || "—" }),
      el("td", { class: "num allowed", text: rate(a) }),
      el("td", { class: "num denied", text: rate(d) }),
      el("td", null, spark),
      el("td", { class: "num", text: num(p.allowed) }),
      el("td", { class: "num", text: num(p.denied) }),
      el("td", { class: "num" + (p.shadow_denials ? " warn" : ""), text: num(p.shadow_denials) }),
      el("td", { class: "num" + (p.degraded ? " bad" : ""), text: num(p.degraded) }),
      el("td", { class: "num", text: num(p.over_limit_cache_hits) })));
  }
  for (const name of history.keys()) if (!seen.has(name)) history.delete(name);
  $("policies").tBodies[0].replaceChildren(...rows);
}

function drawSpark(canvas, h) {
  const g = canvas.getContext("2d");
  if (!g) return;
  const w = canvas.width, ht = canvas.height;
  g.clearRect(0, 0, w, ht);
  const top = Math.max(1, ...h.map((p) => Math.max(p.allowed, p.denied)));
  const css = getComputedStyle(document.documentElement);
  for (const [field, color] of [["allowed", "--allowed"], ["denied", "--denied"]]) {
    g.strokeStyle = css.getPropertyValue(color).trim() || "#888";
    g.lineWidth = 1.5;
    g.beginPath();
    h.forEach((p, i) => {
      const x = w - (h.length - 1 - i) * (w / (HISTORY - 1));
      const y = ht - 1 - (p[field] / top) * (ht - 2);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }
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

// setupKeys builds one table per tracked policy, once per set of names.
function setupKeys(names) {
  const key = names.join("\n");
  if (key === trackedNames) return;
  trackedNames = key;
  const box = $("keys");
  keyViews.clear();
  if (!names.length) {
    box.replaceChildren(el("p", { class: "note" }, "No policy has ", el("code", { text: "track" }), "."));
    return;
  }
  const sections = names.map((name) => {
    const sort = el("select", { "aria-label": "sort " + name });
    for (const o of ["requests", "denied", "last_seen"]) sort.append(el("option", { value: o, text: "by " + o.replace("_", " ") }));
    const status = el("span", { class: "note" });
    const tbody = el("tbody");
    const view = { sort, tbody, status };
    keyViews.set(name, view);
    sort.addEventListener("change", () => loadKeys(name, view));
    return el("div", null,
      el("div", { class: "keys-head" }, el("h3", { text: name }), sort, status),
      el("table", null,
        el("thead", null, el("tr", null,
          el("th", { text: "key" }), el("th", { class: "num", text: "requests" }),
          el("th", { class: "num", text: "denied" }), el("th", { text: "last seen" }), el("th", { text: "first seen" }))),
        tbody));
  });
  box.replaceChildren(...sections);
  loadAllKeys();
}

// adminHeaders are the fields of a request to an admin endpoint.
function adminHeaders() {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  return headers;
}

async function loadKeys(name, view) {
  const q = new URLSearchParams({ policy: name, sort: view.sort.value, limit: "10" });
  const headers = adminHeaders();
  try {
    const res = await fetch("v1/keys?" + q, { headers, cache: "no-store", credentials: "omit" });
    const body = await res.json();
    if (!res.ok) {
      view.status.textContent = (body.error && body.error.message) || "HTTP " + res.status;
      view.status.className = "note bad";
      view.tbody.replaceChildren();
      return;
    }
    const now = new Date();
    view.status.textContent = `${body.keys.length} shown`;
    view.status.className = "note";
    const rows = body.keys.map((k) => el("tr", null,
      el("td", { class: "key", text: k.key, title: k.key }),
      el("td", { class: "num", text: num(k.requests) }),
      el("td", { class: "num" + (k.denied ? " denied" : ""), text: num(k.denied) }),
      el("td", { text: when(k.last_seen, now) }),
      el("td", { text: new Date(k.first_seen).toLocaleString() })));
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

async function poll() {
  try {
    const res = await fetch("v1/stats", { headers: adminHeaders(), cache: "no-store", credentials: "omit" });
    if (res.status === 401 || res.status === 403) {
      let msg = "HTTP " + res.status;
      try {
        const body = await res.json();
        if (body.error && body.error.message) msg = body.error.message;
      } catch (e) { /* not JSON: keep the status */ }
      throw new Error(msg + "; type the admin token below");
    }
    if (!res.ok) throw new Error("HTTP " + res.status);
    const s = await res.json();
    render(s);
    prev = s;
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

}

document.addEventListener("DOMContentLoaded", () => {
  $("use-token").addEventListener("click", useToken);
  $("token").addEventListener("keydown", (e) => { if (e.key === "Enter") useToken(); });
  $("forget-token").addEventListener("click", () => { $("token").value = ""; useToken(); });
  poll();
  setInterval(loadAllKeys, KEYS_MS);
});
