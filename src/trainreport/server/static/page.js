"use strict";
// trainreport live page. Plain JavaScript; its one library, uPlot, is served by this server
// (static/vendor/uplot); no network beyond this server. Every string that came from a
// client (ids, metric names, details) is written with textContent, never as HTML.
(function () {
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
    "#ca8a04", "#db2777", "#4f46e5", "#65a30d"];
  const KNOWN_DETAILS = new Set(["phase", "step", "max_steps", "epoch", "num_epochs",
    "percentage_done", "eta_seconds", "updated_at", "checkpoint_path", "hyperparameters",
    "metrics", "error"]);
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  const hashParams = new URLSearchParams(window.location.hash.slice(1));
  const token = hashParams.get("token");
  const headers = token ? { "Authorization": "Bearer " + token } : {};

  // ---- small DOM helpers -------------------------------------------------------------
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function append(parent, ...children) {
    for (const child of children) if (child) parent.appendChild(child);
    return parent;
  }
  function setLive(ok, text) {
    const live = document.getElementById("live");
    live.className = ok ? "live ok" : "live err";
    live.textContent = text;
  }
  function taskHref(jobId, taskId) {
    return "/jobs/" + encodeURIComponent(jobId) + "/tasks/" + encodeURIComponent(taskId) +
      window.location.hash;
  }
  async function getJson(path) {
    const response = await fetch(path, { headers: headers, cache: "no-store" });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try { const body = await response.json(); if (body.message) message = body.message; }
      catch (e) { /* not JSON */ }
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }
  function describeError(error) {
    if (error.status === 401) {
      return token ? "the token was refused" : "this server requires a token";
    }
    if (error.status === 403) return "this token may not read this job";
    return "error: " + error.message;
  }
  // 401 (no token, or a refused one) and 403 (a job token for another job) ask for a token.
  function needsToken(error) { return error.status === 401 || error.status === 403; }
  // A 401: ask for the token instead of showing an empty page. The token goes into the
  // URL fragment (#token=...), which browsers never send to a server, and the page reloads.
  function askForToken(container, error) {
    const card = el("section", "card token");
    const input = el("input");
    input.type = "password";
    input.autocomplete = "off";
    input.placeholder = "the server's token";
    const button = el("button", null, "Open");
    const open = () => {
      if (!input.value) return;
      window.location.hash = "token=" + encodeURIComponent(input.value.trim());
      window.location.reload();
    };
    button.addEventListener("click", open);
    input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
    const forbidden = error && error.status === 403;
    append(card,
      el("h2", null, forbidden ? "This token is for another job" :
        token ? "The token was refused" : "This server requires a token"),
      el("p", "muted", (forbidden ? "The token in this page's address reads one job only. " :
        token ? "The server refused the token in this page's address. " :
        "Its API answers only requests that carry a token. ") +
        "Enter the admin token trainreport serve was given (--token-file or " +
        "TRAINREPORT_SERVER_TOKEN) or a job token from `trainreport token`. It is kept in " +
        "this page's address after #, which the browser never sends to the server."),
      append(el("div", "row"), input, button));
    container.replaceChildren(card);
    input.focus();
  }

  // ---- formatting --------------------------------------------------------------------
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function fmtNum(v) {
    if (!isNum(v)) return v === null || v === undefined ? "–" : String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (Number.isInteger(v)) return String(v);
    return String(parseFloat(v.toPrecision(5)));
  }
  function fmtTick(v, step) {
    const a = Math.max(Math.abs(v), Math.abs(step));
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v === 0 ? "0" : v.toExponential(1);
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return v.toFixed(Math.min(decimals, 6));
  }
  function fmtDuration(seconds) {
    if (!isNum(seconds)) return "–";
    let s = Math.max(0, Math.round(seconds));
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (h > 0) return h + " h " + String(m).padStart(2, "0") + " min";
    if (m > 0) return m + " min " + String(s).padStart(2, "0") + " s";
    return s + " s";
  }
  function fmtAgo(iso) {
    if (typeof iso !== "string") return "";
    const t = Date.parse(iso);
    if (isNaN(t)) return "";
    const d = (Date.now() - t) / 1000;
    if (d < 0) return "just now";
    if (d < 60) return Math.round(d) + " s ago";
    if (d < 3600) return Math.round(d / 60) + " min ago";
    if (d < 86400) return Math.round(d / 3600) + " h ago";
    return Math.round(d / 86400) + " d ago";
  }
  function fmtValue(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return fmtNum(v);
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function badge(status) {
    const known = ["pending", "running", "completed", "failed", "cancelled"];
    const text = typeof status === "string" ? status : "unknown";
    return el("span", "badge " + (known.includes(text) ? text : ""), text);
  }
  function progressBar(percentage, big) {
    const wrap = el("div", "pct");
    const bar = el("div", big ? "bar big" : "bar");
    const fill = el("span");
    const pct = isNum(percentage) ? Math.max(0, Math.min(100, percentage)) : 0;
    fill.style.width = pct + "%";
    append(bar, fill);
    append(wrap, bar, el("span", "muted", isNum(percentage) ? pct.toFixed(1) + " %" : "–"));
    return wrap;
  }
  // A terminal status ends the phase (docs/lifecycle.md), whatever an older writer stored;
  // an ETA means something only while the task runs.
  function phaseText(status, phase) {
    return TERMINAL.has(status) ? "done" : fmtValue(phase);
  }
  // Text that may wrap only between words: after "/", "_", ".", "-", "=", ":", ","
  // and at a camelCase boundary (a <wbr> each), never inside a word unless one word
  // alone is wider than its box (overflow-wrap in page.css).
  function breakable(node, text) {
    const parts = String(text).split(/(?<=[\/_.\-=:,])|(?<=[a-z])(?=[A-Z])/);
    parts.forEach((part, i) => {
      if (i > 0) node.appendChild(document.createElement("wbr"));
      node.appendChild(document.createTextNode(part));
    });
    return node;
  }
  // The server marks a running task that has gone silent (docs/protocol.md, "Stale
  // tasks"); its message replaces the live ETA and the "updated" time.
  function staleMessage(task) {
    const stale = task.stale;
    return stale && typeof stale.message === "string" ? stale.message : null;
  }
  function updatedCell(task) {
    const stale = staleMessage(task);
    if (!stale) return el("td", "muted", fmtAgo(task.updated_at));
    const cell = el("td", "stale", stale);  // wraps (page.css); the whole text on hover too
    cell.title = stale;
    return cell;
  }
  // Whole numbers with thousands separators ("100,000"), anything else as fmtValue.
  function fmtCount(v) {
    return Number.isInteger(v) ? v.toLocaleString("en-US") : fmtValue(v);
  }
  function stepText(step, max) {
    if (step === null || step === undefined) return "–";
    return isNum(max) ? fmtCount(step) + " / " + fmtCount(max) : fmtCount(step);
  }

  // ---- index page --------------------------------------------------------------------
  // Tasks ticked for comparison ("job/task"); kept across the list's refreshes.
  const selected = new Set();
  function compareHref(keys) {
    const [first, ...rest] = keys;
    const [jobId, taskId] = first.split("/");
    const query = new URLSearchParams();
    for (const key of rest) query.append("run", key);
    return "/jobs/" + encodeURIComponent(jobId) + "/tasks/" + encodeURIComponent(taskId) +
      (rest.length ? "?" + query.toString() : "") + window.location.hash;
  }
  function compareBar() {
    const bar = el("div", "comparebar");
    const button = el("button", "primary", "Compare selected");
    button.type = "button";
    button.id = "compare";
    const count = el("span", "muted", "");
    const update = () => {
      button.disabled = selected.size < 2;
      count.textContent = selected.size ? selected.size + " selected" :
        "tick two or more tasks to see their curves side by side";
    };
    button.addEventListener("click", () => {
      if (selected.size >= 2) window.location.href = compareHref(Array.from(selected));
    });
    append(bar, button, count);
    return { node: bar, update: update };
  }

  async function refreshIndex() {
    const main = document.getElementById("main");
    try {
      const data = await getJson("/v1/jobs");
      const frag = document.createDocumentFragment();
      append(frag, el("h1", null, "Jobs"));
      const bar = compareBar();
      if (data.jobs.length) append(frag, bar.node);
      if (!data.jobs.length) {
        const empty = el("div", "card empty");
        append(empty, el("div", null, "No jobs yet. Point a reporter at this server, e.g."),
          el("code", null, "TRAINREPORT_URL=" + window.location.origin +
            " TRAINREPORT_JOB_ID=my-job python train.py"));
        append(frag, empty);
      }
      for (const job of data.jobs) {
        const card = el("section", "card");
        const head = el("div", "jobhead");
        append(head, el("span", "id", job.job_id),
          el("span", "muted", "created " + fmtAgo(job.created_at)),
          job.cancel_requested ? el("span", "badge cancel", "cancel requested") : null);
        append(card, head);
        if (!job.tasks.length) {
          append(card, el("div", "muted", "no tasks yet"));
        } else {
          const table = el("table", "tasks");
          const hr = el("tr");
          append(hr, append(el("th", "pick"), el("span", "sr", "compare")));
          for (const h of ["task", "status", "phase", "step", "progress", "updated"]) {
            append(hr, el("th", null, h));
          }
          append(table, append(el("thead"), hr));
          const body = el("tbody");
          for (const task of job.tasks) {
            const tr = el("tr");
            const key = job.job_id + "/" + task.task_id;
            const pick = el("input");
            pick.type = "checkbox";
            pick.className = "pick";
            pick.checked = selected.has(key);
            pick.setAttribute("aria-label", "compare " + key);
            pick.dataset.run = key;
            pick.addEventListener("change", () => {
              if (pick.checked) selected.add(key); else selected.delete(key);
              bar.update();
            });
            const link = el("a", null, task.task_id);
            link.href = taskHref(job.job_id, task.task_id);
            append(tr, append(el("td", "pick"), pick), append(el("td"), link),
              append(el("td"), badge(task.status)),
              el("td", null, phaseText(task.status, task.phase)),
              el("td", "num", stepText(task.step, task.max_steps)),
              append(el("td"), progressBar(task.percentage_done, false)),
              updatedCell(task));
            append(body, tr);
          }
          append(table, body);
          append(card, table);
        }
        append(frag, card);
      }
      bar.update();
      main.replaceChildren(frag);
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (error) {
      setLive(false, describeError(error));
      if (needsToken(error)) {
        askForToken(main, error);
        return;
      }
    }
    window.setTimeout(refreshIndex, 3000);
  }

  // ---- the view: what the URL's query holds -----------------------------------------
  // ?run=JOB/TASK (repeated: more runs side by side) &smoothing=0.6 &x=step|epoch|relative|wall
  // &logy=TITLE &logx=TITLE (repeated) &yrange=TITLE:all|pct (a chart's outlier choice)
  // &from=STEP&to=STEP (the zoom) &q=SEARCH &closed=SECTION (repeated). The token stays in
  // the fragment, which is never sent to the server.
  const X_MODES = ["step", "epoch", "relative", "wall"];
  const X_LABELS = { step: "step", epoch: "epoch", relative: "relative time", wall: "wall time" };
  const view = {
    runs: [], smoothing: 0.6, x: "step", logy: new Set(), logx: new Set(), yrange: new Map(),
    from: null, to: null, q: "", closed: new Set(),
  };
  function readView(jobId, taskId) {
    const q = new URLSearchParams(window.location.search);
    view.runs = [{ job: jobId, task: taskId }];
    const seen = new Set([jobId + "/" + taskId]);
    for (const key of q.getAll("run")) {
      const parts = key.split("/");
      if (parts.length === 2 && parts[0] && parts[1] && !seen.has(key)) {
        seen.add(key);
        view.runs.push({ job: parts[0], task: parts[1] });
      }
    }
    const smoothing = parseFloat(q.get("smoothing"));
    if (isFinite(smoothing)) view.smoothing = Math.max(0, Math.min(0.999, smoothing));
    if (X_MODES.includes(q.get("x"))) view.x = q.get("x");
    view.logy = new Set(q.getAll("logy"));
    view.logx = new Set(q.getAll("logx"));
    for (const entry of q.getAll("yrange")) {
      const cut = entry.lastIndexOf(":");
      const mode = entry.slice(cut + 1);
      if (cut > 0 && (mode === "all" || mode === "pct")) view.yrange.set(entry.slice(0, cut), mode);
    }
    const from = parseInt(q.get("from"), 10), to = parseInt(q.get("to"), 10);
    if (isFinite(from) && isFinite(to) && from >= 0 && to >= from) {
      view.from = from; view.to = to;
    }
    view.q = q.get("q") || "";
    view.closed = new Set(q.getAll("closed"));
  }
  function writeView() {
    const q = new URLSearchParams();
    for (const run of view.runs.slice(1)) q.append("run", run.job + "/" + run.task);
    if (view.smoothing !== 0.6) q.set("smoothing", String(view.smoothing));
    if (view.x !== "step") q.set("x", view.x);
    for (const t of view.logy) q.append("logy", t);
    for (const t of view.logx) q.append("logx", t);
    for (const [t, mode] of view.yrange) q.append("yrange", t + ":" + mode);
    if (view.from !== null) { q.set("from", String(view.from)); q.set("to", String(view.to)); }
    if (view.q) q.set("q", view.q);
    for (const s of view.closed) q.append("closed", s);
    const search = q.toString();
    window.history.replaceState(null, "", window.location.pathname +
      (search ? "?" + search : "") + window.location.hash);
  }

  // ---- series maths (pure) -------------------------------------------------------------
  // TensorBoard's debiased exponential moving average ("classicSmoothing" in
  // line_chart_v2/data_transformer.ts): a non-finite point stays a gap and does not
  // advance the average; a constant series is left as it is.
  function smooth(values, weight) {
    const out = new Array(values.length);
    let last = 0, count = 0;
    let constant = true, first = null;
    for (const v of values) {
      if (!isNum(v)) continue;
      if (first === null) first = v; else if (v !== first) { constant = false; break; }
    }
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (!isNum(v)) { out[i] = null; continue; }
      if (weight <= 0 || constant) { out[i] = v; continue; }
      last = last * weight + (1 - weight) * v;
      count += 1;
      out[i] = last / (weight === 1 ? 1 : 1 - Math.pow(weight, count));
    }
    return out;
  }
  // The p-th percentile (0..1) of sorted finite numbers, interpolated.
  function percentile(sorted, p) {
    if (!sorted.length) return null;
    const at = (sorted.length - 1) * p, lo = Math.floor(at), hi = Math.ceil(at);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
  }
  // Fractional epochs: each point's epoch plus how far its step is into that epoch,
  // judged from the steps at which this run's points of each epoch start.
  function epochStarts(lines) {
    const starts = new Map();
    for (const s of lines) {
      for (let i = 0; i < s.steps.length; i++) {
        const e = s.epochs ? s.epochs[i] : null;
        if (!isNum(e)) continue;
        if (!starts.has(e) || s.steps[i] < starts.get(e)) starts.set(e, s.steps[i]);
      }
    }
    const keys = Array.from(starts.keys()).sort((a, b) => a - b);
    const spans = new Map();
    keys.forEach((e, i) => {
      const span = i + 1 < keys.length ? starts.get(keys[i + 1]) - starts.get(e) :
        i > 0 ? starts.get(e) - starts.get(keys[i - 1]) : 0;
      spans.set(e, span);
    });
    return { starts: starts, spans: spans };
  }
  function epochOf(map, step, epoch) {
    if (!isNum(epoch)) return null;
    const start = map.starts.get(epoch), span = map.spans.get(epoch);
    if (start === undefined || !span) return epoch;
    return epoch + Math.min(0.999, Math.max(0, (step - start) / span));
  }
  // The first index whose xs[i] >= x (xs sorted).
  function lowerBound(xs, x) {
    let lo = 0, hi = xs.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function nearest(xs, x) {
    if (!xs.length) return -1;
    const i = lowerBound(xs, x);
    if (i <= 0) return 0;
    if (i >= xs.length) return xs.length - 1;
    return x - xs[i - 1] <= xs[i] - x ? i - 1 : i;
  }
  function sectionOf(name) {
    const slash = name.indexOf("/");
    if (slash > 0) return name.slice(0, slash);
    const m = /^(train|val|eval|test|system)_/.exec(name);
    return m ? m[1] : "other";
  }
  function isLoss(name) { return name === "loss" || name.endsWith("_loss"); }
  function groupOf(name) {
    return isLoss(name) ? { key: "\u0000loss", title: "loss", section: "loss" } :
      { key: name, title: name, section: sectionOf(name) };
  }
  function sectionOrder(name) {
    const fixed = ["loss", "train", "val", "eval", "test"];
    const i = fixed.indexOf(name);
    if (i >= 0) return String(i);
    if (name === "system") return "8";
    if (name === "other") return "9";
    return "5" + name;
  }
  // A search: "/regex/flags" or a case-insensitive substring.
  function matcher(text) {
    const m = /^\/(.+)\/([a-z]*)$/.exec(text);
    if (m) {
      try { const re = new RegExp(m[1], m[2] || "i"); return (s) => re.test(s); }
      catch (e) { return null; }
    }
    const needle = text.toLowerCase();
    return (s) => s.toLowerCase().includes(needle);
  }
  function csvField(v) {
    if (v === null || v === undefined) return "";
    let s = String(v);
    if (typeof v === "string" && /^[=+\-@\t\r]/.test(s)) s = "'" + s;  // no spreadsheet formulas
    return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }
  function fileName(text) { return String(text).replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 120); }
  function download(name, blob) {
    const a = el("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }
  function theme() {
    const css = getComputedStyle(document.documentElement);
    const v = (k) => css.getPropertyValue(k).trim();
    return { ink: v("--muted"), grid: v("--grid"), bg: v("--card"), text: v("--ink") };
  }
  function withAlpha(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  // ---- the runs and their series -----------------------------------------------------
  // run: {job, task, base, label, listing: Map(name -> length), series: Map(name -> points),
  //       error}. points: {steps, epochs, times, values, length, zoom: "from:to"|""}.
  const DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3]];
  const api = { times: false, epochs: false, incremental: null };  // what the server gives
  function seriesUrl(run, names, extra) {
    const q = new URLSearchParams();
    for (const n of names) q.append("name", n);
    for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) q.set(k, v);
    return run.base + "/series?" + q.toString();
  }
  // Names in chunks whose query stays short (a URL of at most ~6,000 characters).
  function chunks(names) {
    const out = [];
    let cur = [], size = 0;
    for (const n of names) {
      const len = encodeURIComponent(n).length + 6;
      if (cur.length && size + len > 6000) { out.push(cur); cur = []; size = 0; }
      cur.push(n); size += len;
    }
    if (cur.length) out.push(cur);
    return out;
  }
  function zoomKey() { return view.from === null ? "" : view.from + ":" + view.to; }
  function inZoom(points) {
    if (view.from === null) return points;
    const out = { steps: [], epochs: [], times: [], values: [] };
    for (let i = 0; i < points.steps.length; i++) {
      const s = points.steps[i];
      if (s < view.from || s > view.to) continue;
      out.steps.push(s);
      out.epochs.push(points.epochs ? points.epochs[i] : null);
      out.times.push(points.times ? points.times[i] : null);
      out.values.push(points.values[i]);
    }
    return out;
  }
  function noteApi(entry) {
    if (Array.isArray(entry.times) && entry.times.some((t) => t !== null)) api.times = true;
    if (Array.isArray(entry.epochs) && entry.epochs.some((e) => e !== null)) api.epochs = true;
  }
  // The listing's last point says whether the series carry times and epochs (x-axis choices).
  function noteSummary(entry) {
    if (entry.last_time !== null && entry.last_time !== undefined) api.times = true;
    if (entry.last_epoch !== null && entry.last_epoch !== undefined) api.epochs = true;
  }
  function normalise(entry) {
    const n = entry.steps.length;
    return {
      steps: entry.steps, values: entry.values,
      epochs: Array.isArray(entry.epochs) ? entry.epochs : new Array(n).fill(null),
      times: Array.isArray(entry.times) ? entry.times : new Array(n).fill(null),
    };
  }
  // Read `names` of `run` at the chart's resolution, for the zoom shown (from/to), in place.
  async function load(run, names, width) {
    const zoom = zoomKey();
    for (const part of chunks(names)) {
      const body = await getJson(seriesUrl(run, part, {
        max_points: Math.max(4, width), from: view.from, to: view.to }));
      for (const [name, entry] of Object.entries(body.series)) {
        noteApi(entry);
        const points = inZoom(normalise(entry));  // an older server ignores from/to
        points.length = entry.length;
        points.zoom = zoom;
        run.series.set(name, points);
      }
    }
  }
  // Only the points that came after those the page has (`after=<length>`), appended.
  // Returns the names whose points changed. A server without `after` answers with whole
  // series (no `first_index`): those replace what the page had.
  async function appendNew(run, names, width) {
    const byLength = new Map();
    for (const n of names) {
      const have = run.series.get(n);
      const now = run.listing.get(n);
      if (!have || have.zoom !== "" || now === undefined || now === have.length) continue;
      if (now < have.length) { byLength.set(-1, (byLength.get(-1) || []).concat([n])); continue; }
      byLength.set(have.length, (byLength.get(have.length) || []).concat([n]));
    }
    const changed = [];
    for (const [after, group] of byLength) {
      if (after < 0 || api.incremental === false) { await load(run, group, width); changed.push(...group); continue; }
      for (const part of chunks(group)) {
        const body = await getJson(seriesUrl(run, part, { after: after, max_points: Math.max(4, width) }));
        if (zoomKey() !== "") return changed;  // the user zoomed meanwhile: that read wins
        for (const [name, entry] of Object.entries(body.series)) {
          noteApi(entry);
          const fresh = normalise(entry);
          const have = run.series.get(name);
          if (typeof entry.first_index !== "number") {
            api.incremental = false;
            run.series.set(name, Object.assign(fresh, { length: entry.length, zoom: "" }));
          } else if (entry.first_index === have.length || entry.first_index === after) {
            api.incremental = true;
            for (const k of ["steps", "epochs", "times", "values"]) have[k] = have[k].concat(fresh[k]);
            have.length = entry.length;
          } else {
            await load(run, [name], width);
          }
          changed.push(name);
        }
      }
    }
    return changed;
  }

  // ---- one chart ---------------------------------------------------------------------
  // chart: {key, title, section, names:Set, card, plot, legend, tip, u, lines, built, wanted}
  const charts = new Map();
  const chartOfCard = new WeakMap();
  function defaultRange(chart) {
    return Array.from(chart.names).some((n) => n.startsWith("train_") || n === "loss") ? "pct" : "all";
  }
  function rangeMode(chart) { return view.yrange.get(chart.title) || defaultRange(chart); }
  function xAvailable(mode) {
    if (mode === "epoch") return api.epochs;
    if (mode === "relative" || mode === "wall") return api.times;
    return true;
  }
  function xMode() { return xAvailable(view.x) ? view.x : "step"; }

  // The chart's lines, each on its own x: one per (run, series) with points loaded.
  function chartLines(chart) {
    const multi = view.runs.length > 1;
    const names = Array.from(chart.names).sort((a, b) => (isLoss(a) && a.startsWith("train") ? -1 :
      isLoss(b) && b.startsWith("train") ? 1 : a < b ? -1 : a > b ? 1 : 0));
    const mode = xMode(), logx = view.logx.has(chart.title) && mode !== "wall";
    const logy = view.logy.has(chart.title);
    const lines = [];
    view.runs.forEach((run, r) => {
      const own = names.map((n) => run.series.get(n)).filter(Boolean);
      const emap = mode === "epoch" ? epochStarts(own) : null;
      let t0 = Infinity;
      if (mode === "relative") {
        for (const s of run.series.values()) {
          for (const t of s.times) if (t !== null && t < t0) t0 = t;
        }
      }
      names.forEach((name, n) => {
        const s = run.series.get(name);
        if (!s) return;
        const xs = [], ys = [], steps = [];
        for (let i = 0; i < s.steps.length; i++) {
          let x;
          if (mode === "step") x = s.steps[i];
          else if (mode === "epoch") x = epochOf(emap, s.steps[i], s.epochs[i]);
          else x = s.times[i] === null ? null : mode === "relative" ? s.times[i] - t0 : s.times[i];
          if (x === null || !isFinite(x) || (logx && x <= 0)) continue;
          if (xs.length && x <= xs[xs.length - 1]) continue;  // x must grow
          let y = s.values[i];
          if (!isNum(y) || (logy && y <= 0)) y = null;
          xs.push(x); ys.push(y); steps.push(s.steps[i]);
        }
        const color = PALETTE[(multi ? r : n) % PALETTE.length];
        lines.push({ run: run, name: name, label: multi ? run.label + " · " + name : name,
          color: color, dash: multi ? DASHES[n % DASHES.length] : [], xs: xs, ys: ys,
          steps: steps, smoothed: smooth(ys, view.smoothing), length: s.length });
      });
    });
    return lines;
  }
  // One table for uPlot: the union of every line's x, each line's raw and smoothed
  // values on it (undefined where a line has no point: spanned; null: a gap).
  function table(lines) {
    const all = new Set();
    for (const l of lines) for (const x of l.xs) all.add(x);
    const xs = Float64Array.from(all).sort();
    const data = [Array.from(xs)];
    for (const l of lines) {
      const raw = new Array(xs.length), sm = new Array(xs.length);
      let j = 0;
      for (let i = 0; i < l.xs.length; i++) {
        while (xs[j] < l.xs[i]) j++;
        raw[j] = l.ys[i]; sm[j] = l.smoothed[i];
      }
      data.push(raw, sm);
    }
    return data;
  }
  function xRangeOf(chart, lines) {
    if (view.from === null) return null;
    if (xMode() === "step") return [view.from, view.to];
    let lo = Infinity, hi = -Infinity;
    for (const l of lines) {
      for (let i = 0; i < l.steps.length; i++) {
        if (l.steps[i] >= view.from && l.steps[i] <= view.to) {
          lo = Math.min(lo, l.xs[i]); hi = Math.max(hi, l.xs[i]);
        }
      }
    }
    return isFinite(lo) ? [lo, hi] : null;
  }
  // Steps of the points a drag over x in [lo, hi] covers.
  function stepsBetween(lines, lo, hi) {
    if (xMode() === "step") return [Math.max(0, Math.ceil(lo)), Math.max(0, Math.floor(hi))];
    let from = Infinity, to = -Infinity;
    for (const l of lines) {
      for (let i = 0; i < l.xs.length; i++) {
        if (l.xs[i] >= lo && l.xs[i] <= hi) {
          from = Math.min(from, l.steps[i]); to = Math.max(to, l.steps[i]);
        }
      }
    }
    return isFinite(from) ? [from, to] : null;
  }
  function yRange(chart, u, dmin, dmax) {
    const logy = view.logy.has(chart.title);
    let lo = dmin, hi = dmax;
    if (rangeMode(chart) === "pct" && chart.lines) {
      const xmin = u.scales.x.min, xmax = u.scales.x.max;
      const values = [];
      chart.lines.forEach((l) => {
        for (let i = 0; i < l.xs.length; i++) {
          if (xmin !== undefined && xmin !== null && (l.xs[i] < xmin || l.xs[i] > xmax)) continue;
          if (l.ys[i] !== null) values.push(l.ys[i]);
        }
      });
      values.sort((a, b) => a - b);
      if (values.length >= 20) { lo = percentile(values, 0.05); hi = percentile(values, 0.95); }
    }
    if (lo === null || hi === null || !isFinite(lo) || !isFinite(hi)) return [0, 1];
    if (logy) return uPlot.rangeLog(lo, hi, 10, false);
    return uPlot.rangeNum(lo, hi, 0.1, true);
  }
  function fmtAxis(v) {
    if (v === null || v === undefined) return "";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(1);
    return String(parseFloat(v.toPrecision(4)));
  }
  function fmtX(x) {
    const mode = xMode();
    if (mode === "wall") return new Date(x * 1000).toLocaleString();
    if (mode === "relative") return fmtDuration(x);
    if (mode === "epoch") return "epoch " + fmtNum(Math.round(x * 1000) / 1000);
    return "step " + fmtCount(x);
  }
  function showTip(chart, u) {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined || !chart.lines || !chart.lines.length) {
      chart.tip.style.display = "none";
      return;
    }
    const x = u.data[0][idx];
    const rows = [el("div", "tx", fmtX(x))];
    for (const l of chart.lines) {
      const i = nearest(l.xs, x);
      if (i < 0) continue;
      const row = el("div", "trow");
      const sw = el("span", "sw");
      sw.style.background = l.color;
      const text = view.smoothing > 0 ?
        fmtNum(l.smoothed[i]) + " (" + fmtNum(l.ys[i]) + ")" : fmtNum(l.ys[i]);
      append(row, sw, el("span", null, l.label + ": " + text),
        l.xs[i] !== x || xMode() !== "step" ? el("span", "muted", " step " + fmtCount(l.steps[i])) : null);
      rows.push(row);
    }
    chart.tip.replaceChildren(...rows);
    chart.tip.style.display = "block";
    const left = u.cursor.left + u.over.offsetLeft;
    const width = chart.plot.clientWidth;
    chart.tip.style.left = (left + 16 + 260 > width ? Math.max(0, left - 270) : left + 16) + "px";
    chart.tip.style.top = "8px";
  }
  function updateLegend(chart) {
    const items = [];
    let points = 0;
    for (const l of chart.lines) {
      const item = el("span", "item");
      const sw = el("span", "sw");
      sw.style.background = l.color;
      let last = null;
      for (let i = l.ys.length - 1; i >= 0; i--) if (l.ys[i] !== null) { last = l.ys[i]; break; }
      append(item, sw, el("span", null, l.label), el("span", "val", fmtNum(last)));
      items.push(item);
      points += l.length || 0;
    }
    chart.legend.replaceChildren(...items);
    chart.count.textContent = fmtCount(points) + (points === 1 ? " point" : " points");
  }
  function toggle(label, pressed, onClick, title) {
    const b = el("button", "tog", label);
    b.type = "button";
    b.setAttribute("aria-pressed", pressed ? "true" : "false");
    if (title) b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }
  function renderTools(chart) {
    const mode = xMode();
    const tools = [
      toggle("log y", view.logy.has(chart.title), () => {
        if (view.logy.has(chart.title)) view.logy.delete(chart.title); else view.logy.add(chart.title);
        writeView(); build(chart);
      }, "logarithmic y axis"),
      toggle("log x", view.logx.has(chart.title) && mode !== "wall", () => {
        if (view.logx.has(chart.title)) view.logx.delete(chart.title); else view.logx.add(chart.title);
        writeView(); build(chart);
      }, "logarithmic x axis"),
      toggle("ignore outliers", rangeMode(chart) === "pct", () => {
        const next = rangeMode(chart) === "pct" ? "all" : "pct";
        if (next === defaultRange(chart)) view.yrange.delete(chart.title);
        else view.yrange.set(chart.title, next);
        writeView(); build(chart);
      }, "y range from the 5th to the 95th percentile of the points shown"),
    ];
    tools[1].disabled = mode === "wall";
    for (const [label, kind] of [["CSV", "csv"], ["JSON", "json"], ["PNG", "png"]]) {
      const b = el("button", "tog", label);
      b.type = "button";
      b.dataset.export = kind;
      b.setAttribute("aria-label", "export " + chart.title + " as " + label);
      b.addEventListener("click", () => exportChart(chart, kind));
      tools.push(b);
    }
    tools[0].setAttribute("aria-label", "log y axis for " + chart.title);
    tools[1].setAttribute("aria-label", "log x axis for " + chart.title);
    tools[2].setAttribute("aria-label", "ignore outliers for " + chart.title);
    chart.tools.replaceChildren(...tools);
  }
  // (Re)draw a chart from the points loaded. A new chart, or one whose axes changed
  // (log, x mode: uPlot scales cannot change kind), is built anew; otherwise setData.
  function build(chart, dataOnly) {
    const lines = chartLines(chart);
    chart.lines = lines;
    renderTools(chart);
    updateLegend(chart);
    chart.empty.style.display = lines.some((l) => l.ys.some((y) => y !== null)) ? "none" : "block";
    const data = table(lines);
    const xr = xRangeOf(chart, lines);
    const shape = [xMode(), view.logx.has(chart.title), view.logy.has(chart.title),
      lines.map((l) => l.label + l.color).join("|"), dark.matches].join(";");
    if (chart.u && dataOnly && chart.shape === shape) {
      chart.xr = xr;
      chart.u.setData(data, true);
      return;
    }
    if (chart.u) chart.u.destroy();
    chart.shape = shape;
    const t = theme();
    const mode = xMode();
    const axis = { stroke: t.ink, grid: { stroke: t.grid, width: 1 }, ticks: { stroke: t.grid, width: 1 },
      font: "11px system-ui, sans-serif" };
    const series = [{ label: X_LABELS[mode] }];
    for (const l of lines) {
      const sparse = l.xs.length <= 60;
      series.push({ label: l.label + " (raw)", stroke: withAlpha(l.color, 0.28), width: 1,
        dash: l.dash, points: { show: sparse, size: 4, fill: withAlpha(l.color, 0.5) } });
      series.push({ label: l.label, stroke: l.color, width: 1.6, dash: l.dash,
        points: { show: sparse, size: 5, fill: l.color } });
    }
    const opts = {
      width: Math.max(200, chart.plot.clientWidth),
      height: 240,
      legend: { show: false },
      series: series,
      scales: {
        x: { time: mode === "wall", distr: view.logx.has(chart.title) && mode !== "wall" ? 3 : 1,
          range: (u, lo, hi) => (chart.xr ? chart.xr :
            lo === hi ? [lo - 1, hi + 1] : [lo, hi]) },
        y: { distr: view.logy.has(chart.title) ? 3 : 1,
          range: (u, lo, hi) => yRange(chart, u, lo, hi) },
      },
      axes: [
        Object.assign({ label: X_LABELS[mode], labelSize: 18, labelFont: "12px system-ui, sans-serif",
          values: mode === "relative" ? (u, vals) => vals.map((v) => fmtDuration(v)) : undefined }, axis),
        Object.assign({ size: 60, values: (u, vals) => vals.map(fmtAxis) }, axis),
      ],
      cursor: { drag: { x: true, y: false, setScale: false }, bind: { dblclick: () => null },
        points: { size: 6 } },
      hooks: {
        setSelect: [(u) => {
          if (u.select.width < 3) return;
          const lo = u.posToVal(u.select.left, "x"), hi = u.posToVal(u.select.left + u.select.width, "x");
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          const range = stepsBetween(chart.lines, lo, hi);
          if (range) setZoom(range[0], range[1]);
        }],
        setCursor: [(u) => showTip(chart, u)],
      },
    };
    chart.xr = xr;
    chart.plot.replaceChildren(chart.tip);
    chart.u = new uPlot(opts, data, chart.plot);
    chart.u.over.setAttribute("aria-label", "chart of " + chart.title +
      ": drag to zoom, double-click to reset");
    chart.u.over.addEventListener("dblclick", () => setZoom(null, null));
    chart.u.over.addEventListener("mouseleave", () => { chart.tip.style.display = "none"; });
  }

  async function exportChart(chart, kind) {
    if (kind === "png") {
      if (!chart.u) return;
      const src = chart.u.ctx.canvas;
      const dpr = src.width / Math.max(1, chart.u.over.clientWidth || src.clientWidth || src.width);
      const out = document.createElement("canvas");
      out.width = src.width; out.height = src.height + Math.round(28 * dpr);
      const ctx = out.getContext("2d");
      const t = theme();
      ctx.fillStyle = t.bg || "#ffffff";
      ctx.fillRect(0, 0, out.width, out.height);
      ctx.fillStyle = t.text || "#1f2933";
      ctx.font = Math.round(14 * dpr) + "px system-ui, sans-serif";
      ctx.fillText(chart.title, 8 * dpr, 19 * dpr);
      ctx.drawImage(src, 0, Math.round(28 * dpr));
      out.toBlob((blob) => download(fileName(view.runs[0].task + "-" + chart.title) + ".png", blob),
        "image/png");
      return;
    }
    // The full-resolution points of the range shown, read from the server.
    const runs = [];
    for (const run of view.runs) {
      const series = {};
      for (const part of chunks(Array.from(chart.names))) {
        const body = await getJson(seriesUrl(run, part, { max_points: 0, from: view.from, to: view.to }));
        for (const [name, entry] of Object.entries(body.series)) series[name] = inZoom(normalise(entry));
      }
      runs.push({ job_id: run.job, task_id: run.task, series: series });
    }
    const base = fileName(view.runs[0].task + "-" + chart.title);
    if (kind === "json") {
      const body = { chart: chart.title, from: view.from, to: view.to, runs: runs };
      download(base + ".json", new Blob([JSON.stringify(body, null, 1)], { type: "application/json" }));
      return;
    }
    const rows = ["job_id,task_id,series,step,epoch,time,value"];
    for (const r of runs) {
      for (const [name, s] of Object.entries(r.series)) {
        for (let i = 0; i < s.steps.length; i++) {
          rows.push([r.job_id, r.task_id, name, s.steps[i], s.epochs[i], s.times[i], s.values[i]]
            .map(csvField).join(","));
        }
      }
    }
    download(base + ".csv", new Blob([rows.join("\n") + "\n"], { type: "text/csv" }));
  }

  // ---- the chart grid: sections, search, drawing on sight -------------------------------
  const sections = new Map();  // name -> {node, grid, count, charts: []}
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  let chartBox = null, observer = null, pending = new Set(), flushing = false;
  function chartWidth() {
    const any = charts.values().next().value;
    return Math.round((any && any.plot.clientWidth) || 520);
  }
  function sectionFor(name) {
    let s = sections.get(name);
    if (s) return s;
    const node = el("details", "section");
    node.open = !view.closed.has(name);
    node.dataset.section = name;
    const summary = el("summary");
    const count = el("span", "muted", "");
    append(summary, el("span", "sname", name), count);
    const grid = el("div", "charts");
    append(node, summary, grid);
    node.addEventListener("toggle", () => {
      if (node.open) view.closed.delete(name); else view.closed.add(name);
      writeView();
    });
    s = { name: name, node: node, grid: grid, count: count, charts: [] };
    sections.set(name, s);
    const order = Array.from(sections.keys()).sort((a, b) => sectionOrder(a) < sectionOrder(b) ? -1 : 1);
    const next = order[order.indexOf(name) + 1];
    chartBox.insertBefore(node, next ? sections.get(next).node : null);
    return s;
  }
  function chartFor(group) {
    let chart = charts.get(group.key);
    if (chart) return chart;
    const card = el("section", "card chart");
    card.dataset.title = group.title;
    const head = el("div", "head");
    const count = el("span", "muted count");
    append(head, el("h2", null, group.title), count);
    const tools = el("div", "tools");
    const legend = el("div", "legend");
    const plot = el("div", "plot");
    const tip = el("div", "tip");
    tip.setAttribute("role", "tooltip");
    const empty = el("div", "muted nofinite", "no finite values yet");
    empty.style.display = "none";
    append(plot, tip);
    append(card, head, tools, legend, empty, plot);
    chart = { key: group.key, title: group.title, section: group.section, names: new Set(),
      card: card, plot: plot, legend: legend, tip: tip, tools: tools, count: count, empty: empty,
      u: null, lines: null, seen: false };
    charts.set(group.key, chart);
    chartOfCard.set(card, chart);
    const section = sectionFor(group.section);
    section.charts.push(chart);
    append(section.grid, card);
    observer.observe(card);
    return chart;
  }
  function applySearch() {
    const match = view.q ? matcher(view.q) : null;
    let shown = 0;
    for (const s of sections.values()) {
      let n = 0;
      for (const c of s.charts) {
        const ok = !match || match(c.title) || Array.from(c.names).some(match);
        c.card.hidden = !ok;
        if (ok) n++;
      }
      s.node.hidden = n === 0;
      s.count.textContent = n === s.charts.length ? String(n) : n + " of " + s.charts.length;
      shown += n;
    }
    const info = document.getElementById("shown");
    if (info) info.textContent = shown === charts.size ? charts.size + " charts" :
      shown + " of " + charts.size + " charts";
  }
  // Charts that came into view: read their points (one request per run) and draw them.
  async function flush() {
    if (flushing) return;
    flushing = true;
    try {
      while (pending.size) {
        const batch = Array.from(pending);
        pending = new Set();
        const width = chartWidth();
        for (const run of view.runs) {
          const names = [];
          for (const c of batch) for (const n of c.names) {
            const have = run.series.get(n);
            if (run.listing.has(n) && (!have || have.zoom !== zoomKey())) names.push(n);
          }
          if (names.length) {
            try { await load(run, names, width); } catch (error) { run.error = describeError(error); }
          }
        }
        refreshXChoices();
        for (const c of batch) build(c);
      }
    } finally {
      flushing = false;
    }
  }
  function want(chart) {
    chart.seen = true;
    pending.add(chart);
    window.requestAnimationFrame(flush);
  }
  function setZoom(from, to) {
    if (from === view.from && to === view.to) return;
    view.from = from; view.to = to;
    writeView();
    const reset = document.getElementById("resetzoom");
    if (reset) reset.disabled = from === null;
    for (const c of charts.values()) if (c.seen) pending.add(c);
    flush();
  }
  function rebuildAll() {
    for (const c of charts.values()) if (c.u || c.seen) build(c);
  }
  function refreshXChoices() {
    const select = document.getElementById("xmode");
    if (!select) return;
    for (const option of select.options) {
      option.disabled = !xAvailable(option.value);
      option.title = option.disabled ? (option.value === "epoch" ?
        "the series carry no epochs" : "this server sends no point times") : "";
    }
    select.value = xMode();
  }
  function toolbar() {
    const bar = el("div", "toolbar card");
    const search = el("input");
    search.type = "search";
    search.id = "search";
    search.placeholder = "search metrics (text or /regex/)";
    search.setAttribute("aria-label", "search metrics: text, or a /regular expression/");
    search.value = view.q;
    search.addEventListener("input", () => { view.q = search.value.trim(); writeView(); applySearch(); });
    const slider = el("input");
    slider.type = "range";
    slider.id = "smoothing";
    slider.min = "0"; slider.max = "0.99"; slider.step = "0.01";
    slider.value = String(view.smoothing);
    slider.setAttribute("aria-label", "smoothing (exponential moving average weight)");
    const shown = el("output", "num", view.smoothing.toFixed(2));
    shown.setAttribute("for", "smoothing");
    let timer = null;
    slider.addEventListener("input", () => {
      view.smoothing = parseFloat(slider.value);
      shown.textContent = view.smoothing.toFixed(2);
      writeView();
      window.clearTimeout(timer);
      timer = window.setTimeout(() => { for (const c of charts.values()) if (c.u) build(c, true); }, 30);
    });
    const xmode = el("select");
    xmode.id = "xmode";
    xmode.setAttribute("aria-label", "x axis");
    for (const m of X_MODES) {
      const o = el("option", null, X_LABELS[m]);
      o.value = m;
      xmode.appendChild(o);
    }
    xmode.addEventListener("change", () => { view.x = xmode.value; writeView(); rebuildAll(); });
    const reset = el("button", "tog", "reset zoom");
    reset.type = "button";
    reset.id = "resetzoom";
    reset.disabled = view.from === null;
    reset.addEventListener("click", () => setZoom(null, null));
    const label = (text, control) => append(el("label", "ctl"), el("span", null, text), control);
    append(bar, label("search", search), label("smoothing", slider), shown, label("x axis", xmode),
      reset, el("span", "muted", ""));
    bar.lastChild.id = "shown";
    return bar;
  }
  function runStrip() {
    const strip = el("div", "runs card");
    strip.id = "runs";
    append(strip, el("span", "muted", "runs"));
    view.runs.forEach((run, r) => {
      const item = el("span", "run");
      const sw = el("span", "sw");
      sw.style.background = PALETTE[r % PALETTE.length];
      const link = el("a", null, run.label);
      link.href = taskHref(run.job, run.task);
      append(item, sw, link);
      if (run.error) append(item, el("span", "muted", " (" + run.error + ")"));
      if (r > 0) {
        const drop = el("button", "tog", "×");
        drop.type = "button";
        drop.setAttribute("aria-label", "remove " + run.label + " from the comparison");
        drop.addEventListener("click", () => {
          view.runs.splice(r, 1);
          writeView();
          window.location.reload();
        });
        append(item, drop);
      }
      append(strip, item);
    });
    return strip;
  }

  // ---- task page ---------------------------------------------------------------------
  function stat(key, value, sub, cls) {
    const box = el("div", cls ? "stat " + cls : "stat");
    append(box, el("div", "k", key));
    if (value instanceof Node) append(box, value); else append(box, el("div", "v", value));
    if (sub) append(box, el("div", "s", sub));
    return box;
  }
  // Key/value rows that flow into as many columns as fit (a Hugging Face run has ~160).
  function kvList(entries) {
    const list = el("div", "kv");
    for (const [k, v] of entries) {
      append(list, append(el("div", "row"), breakable(el("span", "k"), k),
        breakable(el("span", "v"), fmtValue(v))));
    }
    return list;
  }

  function checkpointStat(path) {
    if (path === null || path === undefined) return stat("checkpoint", "–", null, "checkpoint");
    const value = breakable(el("div", "v"), fmtValue(path));
    value.title = fmtValue(path);  // the whole path on hover, whatever the wrapping
    return stat("checkpoint", value, null, "checkpoint");
  }

  // A failed run's error ({"type", "message"} from report_error / report_outcome) as text:
  // the type, then the message as written (line breaks kept); any other key below it.
  function errorCard(error) {
    const card = el("section", "card error");
    const known = error && typeof error === "object" && !Array.isArray(error);
    append(card, append(el("h2"), el("span", null, "error"),
      known && typeof error.type === "string" ? el("span", "type", error.type) : null));
    const message = known ? error.message : error;
    append(card, el("pre", "message", typeof message === "string" ? message : fmtValue(message)));
    if (known) {
      const rest = Object.entries(error).filter(([k]) => k !== "type" && k !== "message").sort();
      if (rest.length) append(card, kvList(rest));
    }
    return card;
  }

  function renderDetails(container, tables, task) {
    const d = task.status_details || {};
    const frag = document.createDocumentFragment();
    const summary = el("section", "card");
    const stats = el("div", "stats");
    append(stats,
      stat("status", append(el("div", "v"), badge(task.status))),
      stat("phase", phaseText(task.status, d.phase)),
      stat("step", stepText(d.step, d.max_steps)),
      stat("epoch", stepText(d.epoch, d.num_epochs)),
      stat("progress", isNum(d.percentage_done) ? d.percentage_done.toFixed(1) + " %" : "–",
        null),
      staleMessage(task) ? stat("eta", staleMessage(task), null, "stale") :
        stat("eta", task.status === "running" ? fmtDuration(d.eta_seconds) : "–"),
      checkpointStat(d.checkpoint_path),
      stat("updated", fmtAgo(d.updated_at) || "–", typeof d.updated_at === "string" ?
        d.updated_at : null));
    append(summary, stats);
    const progress = progressBar(d.percentage_done, true);
    progress.querySelector(".muted").remove();
    append(summary, progress);
    append(frag, summary);
    if (d.error !== undefined && d.error !== null) append(frag, errorCard(d.error));
    container.replaceChildren(frag);

    const cols = el("div", "cols");
    const hp = d.hyperparameters;
    if (hp && typeof hp === "object" && !Array.isArray(hp) && Object.keys(hp).length) {
      const entries = Object.entries(hp).sort();
      const card = el("section", entries.length > 16 ? "card hyperparameters wide" :
        "card hyperparameters");
      append(card, el("h2", null, "hyperparameters (" + entries.length + ")"), kvList(entries));
      append(cols, card);
    }
    const others = Object.entries(d).filter(([k]) => !KNOWN_DETAILS.has(k)).sort();
    if (others.length) {
      const card = el("section", "card details");
      append(card, el("h2", null, "latest values and details"), kvList(others));
      append(cols, card);
    }
    tables.replaceChildren(cols);
  }

  // Every 2 s: the task's details and, per run, the listing of its series (/series/summary:
  // names, lengths and last points, read without any point columns); then only the new points
  // of the charts drawn so far.
  async function refreshTask(parts) {
    const started = Date.now();
    const primary = view.runs[0];
    try {
      const [task, ...listings] = await Promise.all([
        getJson(primary.base + "?metrics=false"),
        ...view.runs.map((run) => getJson(run.base + "/series/summary").catch((error) => {
          if (run === primary) throw error;
          run.error = describeError(error);
          return { series: {} };
        })),
      ]);
      renderDetails(parts.details, parts.tables, task);
      let added = false;
      listings.forEach((listing, r) => {
        const run = view.runs[r];
        for (const [name, entry] of Object.entries(listing.series)) {
          noteSummary(entry);
          run.listing.set(name, entry.length);
          const chart = chartFor(groupOf(name));
          if (!chart.names.has(name)) { chart.names.add(name); added = true; if (chart.seen) pending.add(chart); }
        }
      });
      if (added) applySearch();
      refreshXChoices();
      parts.noCharts.style.display = charts.size ? "none" : "block";
      const width = chartWidth();
      const changed = new Set();
      for (const run of view.runs) {
        const names = [];
        for (const c of charts.values()) if (c.seen) for (const n of c.names) names.push(n);
        for (const n of await appendNew(run, names, width)) changed.add(n);
        // appended points grow a curve past its resolution: read it thinned again
        const thick = zoomKey() !== "" ? [] : names.filter((n) => {
          const s = run.series.get(n);
          return s && s.zoom === "" && s.steps.length > 4 * Math.max(width, 500);
        });
        if (thick.length) { await load(run, thick, width); for (const n of thick) changed.add(n); }
      }
      for (const c of charts.values()) {
        if (c.u && Array.from(c.names).some((n) => changed.has(n))) build(c, true);
      }
      if (pending.size) flush();
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (error) {
      if (needsToken(error)) {
        setLive(false, describeError(error));
        askForToken(parts.details, error);
        return;  // nothing to poll for until a token is given (the page reloads then)
      }
      if (error.status === 404) {
        setLive(false, "task not found (yet): waiting for its first update");
      } else {
        setLive(false, describeError(error));
      }
    }
    // every 2 s, but a slow read (a very long run) is given room: at most ~20 % server time
    const delay = Math.max(2000, 5 * (Date.now() - started));
    window.setTimeout(() => refreshTask(parts), delay);
  }

  function startTask() {
    const segments = window.location.pathname.split("/");
    const jobId = decodeURIComponent(segments[2] || "");
    const taskId = decodeURIComponent(segments[4] || "");
    readView(jobId, taskId);
    for (const run of view.runs) {
      run.base = "/v1/jobs/" + encodeURIComponent(run.job) + "/tasks/" + encodeURIComponent(run.task);
      run.label = run.job + "/" + run.task;
      run.listing = new Map();
      run.series = new Map();
      run.error = null;
    }
    document.title = jobId + " / " + taskId + " · trainreport";
    const crumbs = document.getElementById("crumbs");
    const home = el("a", null, "jobs");
    home.href = "/" + window.location.hash;
    append(crumbs, home, el("span", "sep", "›"), el("span", null, jobId),
      el("span", "sep", "›"), el("span", null, taskId));
    const main = document.getElementById("main");
    const details = el("div");
    const noCharts = el("div", "card empty", "no metric series yet");
    noCharts.style.display = "none";  // shown once the task has been read
    chartBox = el("div", "sections");
    const tables = el("div", "tables");
    append(main, el("h1", null, view.runs.length > 1 ? jobId + " / " + taskId + " and " +
      (view.runs.length - 1) + " more" : jobId + " / " + taskId), details,
      view.runs.length > 1 ? runStrip() : null, toolbar(), noCharts, chartBox, tables);
    observer = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        observer.unobserve(entry.target);
        const chart = chartOfCard.get(entry.target);
        if (chart) want(chart);
      }
    }, { rootMargin: "300px 0px" });
    let resizing = null;
    window.addEventListener("resize", () => {
      window.clearTimeout(resizing);
      resizing = window.setTimeout(() => {
        for (const c of charts.values()) {
          if (c.u) c.u.setSize({ width: Math.max(200, c.plot.clientWidth), height: 240 });
        }
      }, 100);
    });
    dark.addEventListener("change", rebuildAll);
    refreshTask({ details: details, tables: tables, noCharts: noCharts });
  }

  // What the charts show, for the browser tests and the page benchmark (read-only copies).
  window.trainreportPage = {
    charts: () => Array.from(charts.values()).map((c) => ({
      title: c.title, section: c.section, names: Array.from(c.names).sort(), hidden: c.card.hidden,
      built: !!c.u, logy: !!(c.u && c.u.scales.y.distr === 3), logx: !!(c.u && c.u.scales.x.distr === 3),
      x: c.u ? [c.u.scales.x.min, c.u.scales.x.max] : null,
      y: c.u ? [c.u.scales.y.min, c.u.scales.y.max] : null,
      lines: (c.lines || []).map((l) => ({ label: l.label, color: l.color, xs: l.xs, ys: l.ys,
        steps: l.steps, smoothed: l.smoothed, length: l.length })),
    })),
    view: () => ({ runs: view.runs.map((r) => r.label), smoothing: view.smoothing, x: xMode(),
      from: view.from, to: view.to, q: view.q }),
  };
  document.querySelector(".brand").href = "/" + window.location.hash;  // keep the token
  if (document.body.dataset.page === "task") startTask(); else refreshIndex();
})();
