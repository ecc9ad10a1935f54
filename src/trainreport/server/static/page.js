"use strict";
// trainreport live page. Plain JavaScript, no dependencies, no network beyond this server.
// Every string that came from a client (ids, metric names, details) is written with
// textContent, never as HTML.
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
  async function refreshIndex() {
    const main = document.getElementById("main");
    try {
      const data = await getJson("/v1/jobs");
      const frag = document.createDocumentFragment();
      append(frag, el("h1", null, "Jobs"));
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
          for (const h of ["task", "status", "phase", "step", "progress", "updated"]) {
            append(hr, el("th", null, h));
          }
          append(table, append(el("thead"), hr));
          const body = el("tbody");
          for (const task of job.tasks) {
            const tr = el("tr");
            const link = el("a", null, task.task_id);
            link.href = taskHref(job.job_id, task.task_id);
            append(tr, append(el("td"), link), append(el("td"), badge(task.status)),
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

  // ---- charts ------------------------------------------------------------------------
  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  }
  function ticks(lo, hi, step) {
    const out = [];
    const first = Math.ceil(lo / step - 1e-9) * step;
    for (let v = first; v <= hi + step * 1e-9 && out.length < 50; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }
  function groupSeries(series) {
    const groups = new Map();
    for (const name of Object.keys(series)) {
      const isLoss = name === "loss" || name.endsWith("_loss");
      const key = isLoss ? "\u0000loss" : name;
      if (!groups.has(key)) groups.set(key, { title: isLoss ? "loss" : name, names: [] });
      groups.get(key).names.push(name);
    }
    const ordered = [];
    if (groups.has("\u0000loss")) ordered.push(groups.get("\u0000loss"));
    for (const [key, group] of groups) if (key !== "\u0000loss") ordered.push(group);
    return ordered;
  }

  const charts = new Map();  // title -> {card, canvas, tip, legend, data}

  function chartFor(container, title) {
    let chart = charts.get(title);
    if (chart) return chart;
    const card = el("section", "card chart");
    const head = el("div", "head");
    append(head, el("h2", null, title), el("span", "muted count"));
    const legend = el("div", "legend");
    const plot = el("div", "plot");
    const canvas = el("canvas");
    const tip = el("div", "tip");
    append(plot, canvas, tip);
    append(card, head, legend, plot);
    append(container, card);
    chart = { card: card, canvas: canvas, tip: tip, legend: legend, head: head, data: null,
      hover: null };
    canvas.addEventListener("mousemove", (ev) => {
      const rect = canvas.getBoundingClientRect();
      chart.hover = ev.clientX - rect.left;
      drawChart(chart);
    });
    canvas.addEventListener("mouseleave", () => { chart.hover = null; drawChart(chart); });
    charts.set(title, chart);
    return chart;
  }

  function updateLegend(chart) {
    chart.legend.replaceChildren();
    let points = 0;
    for (const s of chart.data.series) {
      const item = el("span", "item");
      const sw = el("span", "sw");
      sw.style.background = s.color;
      let last = null;
      for (let i = s.values.length - 1; i >= 0; i--) {
        if (s.values[i] !== null) { last = s.values[i]; break; }
      }
      append(item, sw, el("span", null, s.name), el("span", "val", fmtNum(last)));
      append(chart.legend, item);
      points += s.length;
    }
    chart.head.querySelector(".count").textContent = points + (points === 1 ? " point" : " points");
  }

  function drawChart(chart) {
    const canvas = chart.canvas;
    const data = chart.data;
    if (!data) return;
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif";

    let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
    for (const s of data.series) {
      for (let i = 0; i < s.steps.length; i++) {
        const x = s.steps[i], y = s.values[i];
        if (x < xmin) xmin = x;
        if (x > xmax) xmax = x;
        if (y !== null && isFinite(y)) { if (y < ymin) ymin = y; if (y > ymax) ymax = y; }
      }
    }
    if (!isFinite(ymin)) {
      ctx.fillStyle = "#66788a";
      ctx.fillText("no finite values yet", 12, 24);
      return;
    }
    if (xmin === xmax) { xmin -= 1; xmax += 1; }
    let pad = (ymax - ymin) * 0.06;
    if (pad === 0) pad = Math.abs(ymin) * 0.1 || 1;
    const ystep = niceStep(ymax - ymin + 2 * pad, 5);
    // a curve that never goes below zero (a loss, a learning rate) gets no negative axis
    const ylo = ymin >= 0 && ymin - pad < 0 ? 0 : Math.floor((ymin - pad) / ystep) * ystep;
    const yhi = Math.ceil((ymax + pad) / ystep) * ystep;
    const yticks = ticks(ylo, yhi, ystep);
    const ylabels = yticks.map((v) => fmtTick(v, ystep));
    let labelWidth = 0;
    for (const label of ylabels) labelWidth = Math.max(labelWidth, ctx.measureText(label).width);
    const left = Math.ceil(labelWidth) + 30, right = 14, top = 10, bottom = 38;
    const plotW = Math.max(10, width - left - right), plotH = Math.max(10, height - top - bottom);
    const xstep = niceStep(xmax - xmin, Math.max(2, Math.floor(plotW / 90)));
    const xticks = ticks(xmin, xmax, Math.max(xstep, 1e-12));
    const sx = (x) => left + ((x - xmin) / (xmax - xmin)) * plotW;
    const sy = (y) => top + (1 - (y - ylo) / (yhi - ylo)) * plotH;

    // grid and tick labels
    ctx.strokeStyle = "#edf0f4";
    ctx.lineWidth = 1;
    ctx.fillStyle = "#66788a";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    yticks.forEach((v, i) => {
      const y = Math.round(sy(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + plotW, y); ctx.stroke();
      ctx.fillText(ylabels[i], left - 6, y);
    });
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const v of xticks) {
      const x = Math.round(sx(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + plotH); ctx.stroke();
      ctx.fillText(fmtTick(v, xstep), x, top + plotH + 5);
    }
    // axes
    ctx.strokeStyle = "#aab4c0";
    ctx.beginPath();
    ctx.moveTo(left + 0.5, top); ctx.lineTo(left + 0.5, top + plotH + 0.5);
    ctx.lineTo(left + plotW, top + plotH + 0.5);
    ctx.stroke();
    // axis labels
    ctx.fillStyle = "#44505c";
    ctx.fillText("step", left + plotW / 2, top + plotH + 22);
    ctx.save();
    ctx.translate(11, top + plotH / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText(data.title, 0, 0);
    ctx.restore();

    // series: lines with gaps at null values, markers where points are sparse
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top - 2, plotW + 2, plotH + 4);
    ctx.clip();
    for (const s of data.series) {
      ctx.strokeStyle = s.color;
      ctx.fillStyle = s.color;
      ctx.lineWidth = 1.6;
      ctx.lineJoin = "round";
      ctx.beginPath();
      let penDown = false;
      for (let i = 0; i < s.steps.length; i++) {
        const v = s.values[i];
        if (v === null) { penDown = false; continue; }
        const x = sx(s.steps[i]), y = sy(v);
        if (penDown) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        penDown = true;
      }
      ctx.stroke();
      const sparse = s.steps.length <= 60;
      for (let i = 0; i < s.steps.length; i++) {
        const v = s.values[i];
        if (v === null) continue;
        const isolated = (i === 0 || s.values[i - 1] === null) &&
          (i === s.steps.length - 1 || s.values[i + 1] === null);
        if (sparse || isolated) {
          ctx.beginPath();
          ctx.arc(sx(s.steps[i]), sy(v), 2.6, 0, 2 * Math.PI);
          ctx.fill();
        }
      }
    }
    ctx.restore();

    // hover: crosshair at the nearest step, values in a tooltip
    if (chart.hover === null || chart.hover < left || chart.hover > left + plotW) {
      chart.tip.style.display = "none";
      return;
    }
    const xAt = xmin + ((chart.hover - left) / plotW) * (xmax - xmin);
    const lines = [];
    let nearestStep = null;
    for (const s of data.series) {
      let best = -1;
      for (let i = 0; i < s.steps.length; i++) {
        if (best < 0 || Math.abs(s.steps[i] - xAt) < Math.abs(s.steps[best] - xAt)) best = i;
      }
      if (best < 0) continue;
      if (nearestStep === null || Math.abs(s.steps[best] - xAt) < Math.abs(nearestStep - xAt)) {
        nearestStep = s.steps[best];
      }
      lines.push(s.name + ": " + fmtNum(s.values[best]) + "  (step " + s.steps[best] + ")");
    }
    if (nearestStep !== null) {
      const x = Math.round(sx(nearestStep)) + 0.5;
      ctx.strokeStyle = "#94a3b8";
      ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + plotH); ctx.stroke();
      ctx.setLineDash([]);
    }
    chart.tip.replaceChildren(...lines.map((line) => el("div", null, line)));
    chart.tip.style.display = "block";
    const tipX = chart.hover + 14 + 240 > width ? chart.hover - 250 : chart.hover + 14;
    chart.tip.style.left = Math.max(0, tipX) + "px";
    chart.tip.style.top = top + 6 + "px";
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

  async function refreshTask(jobId, taskId, parts) {
    const base = "/v1/jobs/" + encodeURIComponent(jobId) + "/tasks/" + encodeURIComponent(taskId);
    const started = Date.now();
    try {
      const width = Math.max(400, Math.round(parts.charts.clientWidth || 1200));
      const [task, cols] = await Promise.all([
        getJson(base + "?metrics=false"),
        getJson(base + "/series?max_points=" + Math.min(4000, width * 2)),
      ]);
      renderDetails(parts.details, parts.tables, task);
      const groups = groupSeries(cols.series);
      const seen = new Set();
      for (const group of groups) {
        const chart = chartFor(parts.charts, group.title);
        seen.add(group.title);
        chart.data = {
          title: group.title,
          series: group.names.map((name, i) => Object.assign({ name: name,
            color: PALETTE[i % PALETTE.length] }, cols.series[name])),
        };
        updateLegend(chart);
        drawChart(chart);
      }
      for (const [title, chart] of charts) {
        if (!seen.has(title)) { chart.card.remove(); charts.delete(title); }
      }
      parts.noCharts.style.display = groups.length ? "none" : "block";
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
    window.setTimeout(() => refreshTask(jobId, taskId, parts), delay);
  }

  function startTask() {
    const segments = window.location.pathname.split("/");
    const jobId = decodeURIComponent(segments[2] || "");
    const taskId = decodeURIComponent(segments[4] || "");
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
    const chartsBox = el("div", "charts");
    const tables = el("div", "tables");
    append(main, el("h1", null, jobId + " / " + taskId), details, noCharts, chartsBox, tables);
    window.addEventListener("resize", () => { for (const chart of charts.values()) drawChart(chart); });
    refreshTask(jobId, taskId,
      { details: details, tables: tables, charts: chartsBox, noCharts: noCharts });
  }

  document.querySelector(".brand").href = "/" + window.location.hash;  // keep the token
  if (document.body.dataset.page === "task") startTask(); else refreshIndex();
})();
