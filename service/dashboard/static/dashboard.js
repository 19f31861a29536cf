// convtune dashboard: sortable tables, upload form, live job page (server-sent events), charts.
// Plain browser JavaScript, no build step; Plotly is loaded by the pages that draw charts.
"use strict";
const convtune = (() => {
  const DASH = "—";
  const num = (v, d) => (v === null || v === undefined ? DASH :
    v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }));
  const pct = (v) => (v === null || v === undefined ? DASH : (100 * v).toFixed(1) + " %");
  const readData = () => JSON.parse(document.getElementById("view-data").textContent);
  const plotConfig = { displaylogo: false, responsive: true };
  const baseLayout = (extra) => Object.assign({
    margin: { l: 60, r: 20, t: 40, b: 45 }, height: 300, showlegend: true,
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } }, font: { size: 12 },
  }, extra);
  // One colour per op kind, the same on every chart.
  const KIND_COLORS = { Conv: "#2563eb", Gemm: "#9333ea", MatMul: "#c026d3", ConvTranspose: "#0891b2",
    "elementwise / other": "#f59e0b", "onnxruntime only": "#94a3b8", "whole model": "#64748b" };
  const kindColor = (k) => KIND_COLORS[k] || "#64748b";
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777",
    "#4b5563", "#65a30d", "#7c3aed", "#0d9488"];
  // Words instead of empty axes.
  function emptyChart(el, text) {
    if (typeof el === "string") el = document.getElementById(el);
    if (window.Plotly) Plotly.purge(el);
    el.innerHTML = "";
    el.appendChild(Object.assign(document.createElement("div"), { className: "empty-chart", textContent: text }));
  }
  // Before drawing: drop an empty-state message, but never Plotly's own nodes (react updates them).
  function chartReady(el) {
    const words = el.querySelector(":scope > .empty-chart");
    if (words) words.remove();
  }
  async function postJson(url, body, token) {
    const headers = { "Content-Type": "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const resp = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
    const data = await resp.json().catch(() => ({}));
    return { ok: resp.ok, status: resp.status, data };
  }

  // Click a header to sort by that column (numbers by data-value, text otherwise); again reverses.
  function makeSortable(table) {
    table.querySelectorAll("th").forEach((th, col) => {
      th.addEventListener("click", () => {
        const asc = th.dataset.order !== "asc";
        table.querySelectorAll("th").forEach((h) => delete h.dataset.order);
        th.dataset.order = asc ? "asc" : "desc";
        const numeric = th.dataset.type === "num";
        const key = (tr) => {
          const td = tr.children[col];
          const raw = td.dataset.value !== undefined ? td.dataset.value : td.textContent.trim();
          if (!numeric) return raw;
          return raw === "" ? -Infinity : parseFloat(raw);
        };
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          const c = numeric ? x - y : String(x).localeCompare(String(y));
          return asc ? c : -c;
        });
        rows.forEach((r) => body.appendChild(r));
      });
    });
  }

  function uploadForm(form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const out = document.getElementById("upload-result");
      const data = new FormData(form);
      const headers = {};
      if (data.has("token")) { headers.Authorization = "Bearer " + data.get("token"); data.delete("token"); }
      if (!data.get("input_shapes")) data.delete("input_shapes");
      out.textContent = "uploading…";
      const resp = await fetch(form.action, { method: "POST", body: data, headers });
      const body = await resp.json().catch(() => ({}));
      if (resp.ok) { window.location.assign("/"); return; }
      out.textContent = body.error ? body.error.message : "upload failed (" + resp.status + ")";
      out.className = "error";
    });
  }

  function drawTimeSplit(split) {
    const el = document.getElementById("time-split");
    if (!split.traces.length) { emptyChart(el, "No per-layer times yet: the job's artifact is profiled against onnxruntime once it is built."); return; }
    // Only contenders something was measured for (the untuned build is not benched by jobs).
    const keep = split.contenders.map((c, i) => split.traces.some((t) => t.y[i])).map((k, i) => (k ? i : -1)).filter((i) => i >= 0);
    const contenders = keep.map((i) => split.contenders[i]);
    const seen = new Set();
    const traces = split.traces.map((t) => ({ ...t, y: keep.map((i) => t.y[i]) })).map((t) => {
      const first = !seen.has(t.kind);
      seen.add(t.kind);
      return {
        type: "bar", orientation: "h", y: contenders, x: t.y, name: t.kind, legendgroup: t.kind,
        showlegend: first, marker: { color: kindColor(t.kind), line: { color: "#fff", width: 1 } },
        text: t.y.map((v) => (v ? t.name : "")), textposition: "inside", insidetextanchor: "middle",
        hovertemplate: "%{y}: %{x:.4f} ms<extra>" + t.name + "</extra>",
      };
    });
    chartReady(el);
    Plotly.react(el, traces, baseLayout({ barmode: "stack", xaxis: { title: { text: "ms per inference" } },
      height: 300, margin: { l: 95, r: 20, t: 40, b: 45 }, uniformtext: { mode: "hide", minsize: 9 } }), plotConfig);
  }

  function drawTop(top) {
    const el = document.getElementById("top-layers");
    if (!top.labels.length) { emptyChart(el, "Not profiled yet: the slowest layers appear once the job's artifact has been profiled."); return; }
    const labels = top.labels.map((l, i) => (i + 1) + ". " + (l.length > 38 ? l.slice(0, 37) + "…" : l));
    const share = top.share.map((v) => (v === null ? "" : (100 * v).toFixed(1) + " %"));
    chartReady(el);
    Plotly.react(el, [
      { type: "bar", orientation: "h", name: "ours", y: labels, x: top.ours_ms, text: share, textposition: "outside",
        marker: { color: top.kinds.map(kindColor) }, hovertemplate: "%{y}: %{x:.4f} ms (%{text} of ours)<extra>ours</extra>" },
      { type: "bar", orientation: "h", name: "onnxruntime", y: labels, x: top.ort_ms,
        marker: { color: "#94a3b8" }, hovertemplate: "%{y}: %{x:.4f} ms<extra>onnxruntime</extra>" },
    ], baseLayout({ barmode: "group", height: Math.max(260, 60 + 34 * labels.length),
      yaxis: { autorange: "reversed", automargin: true }, xaxis: { title: { text: "ms per inference" } },
      margin: { l: 10, r: 50, t: 40, b: 45 } }), plotConfig);
  }

  function drawConvergence(conv) {
    const el = document.getElementById("convergence");
    if (!conv.series.length) { emptyChart(el, "No trial measured yet: each layer's best-so-far curve appears with its first successful trial."); return; }
    const traces = conv.series.map((s, i) => ({
      type: "scatter", mode: "lines+markers", line: { shape: "hv", width: 1.5 }, marker: { size: 4 },
      name: s.name.length > 30 ? s.name.slice(0, 29) + "…" : s.name, x: s.seconds, y: s.gflops,
      hovertemplate: "%{x:.1f} s: %{y:.1f} GFLOP/s<extra>" + s.name + "</extra>",
      color: PALETTE[i % PALETTE.length], line_color: PALETTE[i % PALETTE.length],
    }));
    traces.forEach((t) => { t.line.color = t.color; t.marker.color = t.color; delete t.color; delete t.line_color; });
    chartReady(el);
    Plotly.react(el, traces, baseLayout({ height: 340, showlegend: true,
      legend: { orientation: "v", x: 1.01, y: 1, font: { size: 10 } }, margin: { l: 60, r: 10, t: 10, b: 45 },
      xaxis: { title: { text: "seconds since the job started" }, rangemode: "tozero" },
      yaxis: { title: { text: "best GFLOP/s so far" }, rangemode: "tozero" } }),
      plotConfig);
  }

  function tuneForm(form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const out = document.getElementById("tune-result");
      const data = new FormData(form);
      const body = {};
      for (const key of ["trials_per_task", "budget_minutes", "threads"]) {
        const v = String(data.get(key) || "").trim();
        if (v !== "") body[key] = Number(v);
      }
      body.layout = data.get("layout");
      body.algorithms = data.getAll("algorithms");
      body.precision = data.get("precision");
      out.textContent = "queueing…";
      out.className = "";
      const r = await postJson(form.dataset.url, body, data.get("token"));
      if (r.ok) { window.location.assign("/jobs/" + r.data.id); return; }
      out.textContent = r.data.error ? r.data.error.message : "could not queue the job (" + r.status + ")";
      out.className = "error";
    });
  }

  function cancelForm(form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const out = document.getElementById("cancel-result");
      const data = new FormData(form);
      out.textContent = "cancelling…";
      const r = await postJson(form.dataset.url, {}, data.get("token"));
      out.textContent = r.ok ? "cancel requested: the worker stops at its next measured batch"
        : (r.data.error ? r.data.error.message : "cancel failed (" + r.status + ")");
      out.className = r.ok ? "hint" : "error";
    });
  }

  function setCell(tr, col, value, text) {
    const td = tr.querySelector('[data-col="' + col + '"]');
    if (!td) return;
    td.dataset.value = value === null || value === undefined ? "" : value;
    td.textContent = text;
  }

  // Fill the page from a fresh layers.json without reloading it.
  function applyView(view) {
    document.getElementById("trials-done").textContent = view.trials_done;
    document.getElementById("trials-budget").textContent = view.trials_budget === null ? DASH : view.trials_budget;
    const progress = document.getElementById("job-progress");
    if (progress) progress.textContent = view.progress || "";
    const status = document.getElementById("job-status");
    if (status && view.job) {
      status.textContent = view.job.status;
      status.className = "status status-" + view.job.status;
      document.body.dataset.jobStatus = view.job.status;
      const cancel = document.getElementById("cancel");
      if (cancel && !["queued", "running"].includes(view.job.status)) cancel.remove();
    }
    for (const r of view.rows) {
      const tr = document.querySelector('#layers tr[data-position="' + r.position + '"]');
      if (!tr) continue;
      setCell(tr, "share", r.share, pct(r.share));
      setCell(tr, "profile_ms", r.profile_ms, num(r.profile_ms, 3));
      setCell(tr, "ort_ms", r.ort_ms, num(r.ort_ms, 3));
      setCell(tr, "gap", r.gap, r.gap === null ? DASH : num(r.gap, 2) + "×");
      const gapCell = tr.querySelector('[data-col="gap"]');
      if (gapCell) gapCell.className = r.gap === null ? "gap-none" : r.gap < 0.9 ? "gap-faster" : r.gap <= 1.1 ? "gap-even" : r.gap <= 2 ? "gap-slower" : "gap-far";
      setCell(tr, "trials", r.trials, r.trials + " / " + (r.budget === null ? DASH : r.budget));
      setCell(tr, "best_gflops", r.best_gflops, num(r.best_gflops, 2));
      setCell(tr, "pct_peak", r.pct_peak, r.pct_peak === null ? DASH : num(r.pct_peak, 1) + " %" + (r.pct_peak > 100 ? " ⚠" : ""));
      setCell(tr, "build_errors", r.build_errors, String(r.build_errors));
      setCell(tr, "run_errors", r.run_errors, String(r.run_errors));
    }
    const e2e = document.getElementById("end-to-end");
    if (e2e && view.bench.tuned_ms !== null && !document.getElementById("e2e-ratio")) {
      e2e.innerHTML = "<h3>end to end</h3>";
      const big = Object.assign(document.createElement("p"), { className: "big" });
      big.append(Object.assign(document.createElement("span"), { id: "e2e-ratio", textContent: num(view.bench.time_vs_ort, 2) }), "× onnxruntime");
      const detail = document.createElement("p");
      detail.textContent = num(view.bench.tuned_ms, 3) + " ms vs " + num(view.bench.ort_ms, 3) + " ms, " + view.bench.threads + " threads";
      e2e.append(big, detail);
    }
    const a = view.artifact;
    if (a && !document.getElementById("download")) {
      const box = document.getElementById("artifact");
      box.innerHTML = "<h3>verified artifact</h3>";
      const link = Object.assign(document.createElement("a"),
        { id: "download", className: "button", href: a.download_url, textContent: "Download .so" });
      link.setAttribute("download", "");
      const manifest = Object.assign(document.createElement("a"), { href: a.manifest_url, textContent: "manifest" });
      manifest.setAttribute("download", "");
      const sha = document.createElement("p");
      sha.append("sha256 ", Object.assign(document.createElement("code"), { id: "artifact-sha", textContent: a.sha256 }));
      box.append(link, " ", manifest, sha);
    }
    document.getElementById("time-source").textContent = "per-layer times from " + view.time_split.source;
    drawCharts(view);
  }

  function drawCharts(view) {
    drawTimeSplit(view.time_split);
    drawTop(view.top);
    drawConvergence(view.convergence);
  }

  // Every kind a job's stream may send (tuner/events.py's EventKind, rendered into the page).
  const EVENT_KINDS = JSON.parse(document.body.dataset.eventKinds || "[]");

  function followJob(jobId) {
    let pending = null;
    const refresh = () => {
      if (pending) return;
      pending = setTimeout(async () => {
        pending = null;
        const resp = await fetch("/jobs/" + jobId + "/layers.json");
        if (resp.ok) applyView(await resp.json());
      }, 250);
    };
    const source = new EventSource("/api/jobs/" + jobId + "/events");
    EVENT_KINDS.forEach((kind) => source.addEventListener(kind, refresh));
    source.onmessage = refresh;
    source.addEventListener("end", () => { source.close(); refresh(); document.body.dataset.streamEnded = "1"; });
  }

  function layersPage() {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    const view = readData();
    drawCharts(view);
    const tune = document.getElementById("tune-form");
    if (tune) tuneForm(tune);
    const cancel = document.getElementById("cancel");
    if (cancel) cancelForm(cancel);
    const live = document.body.dataset.liveJob;
    if (live) followJob(live);
  }

  function layerPage() {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    const v = readData();
    const best = v.best_curve;
    const noFlops = !v.workload.flops;
    const why = v.trial_count === 0 ? "No trial measured yet for this layer."
      : noFlops ? "This layer does no floating-point work (a copy or layout change): it has times but no GFLOP/s, see the trials table."
      : !best.n.length ? "No successful trial yet: every measured candidate failed (see the errors below)." : null;
    if (why) {
      ["chart-best-trial", "chart-best-time", "chart-scatter"].forEach((id) => emptyChart(id, why));
    } else {
      const stepLine = (x, name) => ({ type: "scatter", mode: "lines+markers", line: { shape: "hv" },
        x, y: best.gflops, name });
      Plotly.newPlot("chart-best-trial", [stepLine(best.n, "best so far")],
        baseLayout({ showlegend: false, margin: { l: 60, r: 20, t: 10, b: 45 },
          xaxis: { title: { text: "trial" }, rangemode: "tozero" }, yaxis: { title: { text: "GFLOP/s" }, rangemode: "tozero" } }), plotConfig);
      Plotly.newPlot("chart-best-time", [stepLine(best.seconds, "best so far")],
        baseLayout({ showlegend: false, margin: { l: 60, r: 20, t: 10, b: 45 },
          xaxis: { title: { text: "seconds since the " + v.wallclock_from }, rangemode: "tozero" },
          yaxis: { title: { text: "GFLOP/s" }, rangemode: "tozero" } }), plotConfig);
      const s = v.scatter;
      const pick = (ok) => s.n.map((n, i) => i).filter((i) => s.failed[i] !== ok);
      const okIdx = pick(true), badIdx = pick(false);
      Plotly.newPlot("chart-scatter", [
        { type: "scatter", mode: "markers", name: "measured", x: okIdx.map((i) => s.n[i]),
          y: okIdx.map((i) => s.gflops[i]), marker: { size: 7 } },
        { type: "scatter", mode: "markers", name: "failed", x: badIdx.map((i) => s.n[i]),
          y: badIdx.map(() => 0), marker: { symbol: "x", size: 9, color: "#c0392b" } },
      ], baseLayout({ xaxis: { title: { text: "trial" }, rangemode: "tozero" },
        yaxis: { title: { text: "GFLOP/s (failed at 0)" }, rangemode: "tozero" } }), plotConfig);
    }
    const r = v.roofline;
    if (r.intensity === null || r.gflops === null) {
      emptyChart("chart-roofline", r.intensity === null
        ? "No roofline: this layer's arithmetic intensity is not known (not a Conv, Gemm or MatMul)."
        : "No roofline point yet: no successful trial.");
      return;
    }
    const traces = [{ type: "scatter", mode: "markers+text", name: "best schedule", x: [r.intensity], y: [r.gflops],
      text: [num(r.gflops, 1) + " GFLOP/s"], textposition: "top center", marker: { size: 11 } }];
    const lo = Math.min(0.1, r.intensity / 10), hi = Math.max(100, 10 * r.intensity);
    if (r.peak_gflops && r.bandwidth_gbs) {
      // min(peak, bandwidth × intensity): the slope, the ridge, the roof.
      const ridge = r.peak_gflops / r.bandwidth_gbs;
      const xs = [lo, Math.max(lo, Math.min(ridge, hi)), hi];
      traces.push({ type: "scatter", mode: "lines", name: "roof: " + num(r.bandwidth_gbs, 1) + " GB/s, " + num(r.peak_gflops, 0) + " GFLOP/s",
        x: xs, y: xs.map((x) => Math.min(r.peak_gflops, r.bandwidth_gbs * x)), line: { dash: "dash", color: "#64748b" } });
    } else if (r.peak_gflops) {
      traces.push({ type: "scatter", mode: "lines", name: "measured peak", x: [lo, hi], y: [r.peak_gflops, r.peak_gflops],
        line: { dash: "dash" } });
    }
    Plotly.newPlot("chart-roofline", traces, baseLayout({
      xaxis: { type: "log", title: { text: "arithmetic intensity (FLOP/byte)" } },
      yaxis: { type: "log", title: { text: "GFLOP/s" } } }), plotConfig);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("upload");
    if (form) uploadForm(form);
    document.querySelectorAll("#models.sortable").forEach(makeSortable);
  });
  return { layersPage, layerPage };
})();
