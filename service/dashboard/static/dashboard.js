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
    margin: { l: 60, r: 20, t: 10, b: 45 }, height: 300, showlegend: true,
    legend: { orientation: "h", y: -0.25 }, font: { size: 12 },
  }, extra);

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
    if (!split.traces.length) { el.innerHTML = '<p class="hint">nothing measured yet</p>'; return; }
    const traces = split.traces.map((t) => ({
      type: "bar", orientation: "h", name: t.name, y: split.contenders, x: t.y,
      hovertemplate: "%{y}: %{x:.4f} ms<extra>" + t.name + "</extra>",
    }));
    Plotly.react(el, traces, baseLayout({ barmode: "stack", xaxis: { title: { text: "ms per inference" } },
      height: 260, margin: { l: 100, r: 20, t: 10, b: 45 } }), plotConfig);
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
    const status = document.getElementById("job-status");
    if (status && view.job) {
      status.textContent = view.job.status;
      status.className = "status status-" + view.job.status;
      document.body.dataset.jobStatus = view.job.status;
    }
    for (const r of view.rows) {
      const tr = document.querySelector('#layers tr[data-position="' + r.position + '"]');
      if (!tr) continue;
      setCell(tr, "share", r.share, pct(r.share));
      setCell(tr, "trials", r.trials, r.trials + " / " + (r.budget === null ? DASH : r.budget));
      setCell(tr, "best_gflops", r.best_gflops, num(r.best_gflops, 2));
      setCell(tr, "pct_peak", r.pct_peak, r.pct_peak === null ? DASH : num(r.pct_peak, 1) + " %");
      setCell(tr, "ort_ms", r.ort_ms, num(r.ort_ms, 3));
      setCell(tr, "build_errors", r.build_errors, String(r.build_errors));
      setCell(tr, "run_errors", r.run_errors, String(r.run_errors));
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
    drawTimeSplit(view.time_split);
  }

  const EVENT_KINDS = ["queued", "claimed", "requeued", "extracted", "search_planned", "trial_batch",
    "cost_model_warm_start", "build_started", "verified", "done", "succeeded", "failed", "cancelled"];

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
    drawTimeSplit(view.time_split);
    const live = document.body.dataset.liveJob;
    if (live) followJob(live);
  }

  function layerPage() {
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    const v = readData();
    const best = v.best_curve;
    const stepLine = (x, name) => ({ type: "scatter", mode: "lines+markers", line: { shape: "hv" },
      x, y: best.gflops, name });
    Plotly.newPlot("chart-best-trial", [stepLine(best.n, "best so far")],
      baseLayout({ xaxis: { title: { text: "trial" } }, yaxis: { title: { text: "GFLOP/s" } } }), plotConfig);
    Plotly.newPlot("chart-best-time", [stepLine(best.seconds, "best so far")],
      baseLayout({ xaxis: { title: { text: "seconds since the first trial" } }, yaxis: { title: { text: "GFLOP/s" } } }),
      plotConfig);
    const s = v.scatter;
    const pick = (ok) => s.n.map((n, i) => i).filter((i) => s.failed[i] !== ok);
    const okIdx = pick(true), badIdx = pick(false);
    Plotly.newPlot("chart-scatter", [
      { type: "scatter", mode: "markers", name: "measured", x: okIdx.map((i) => s.n[i]),
        y: okIdx.map((i) => s.gflops[i]), marker: { size: 7 } },
      { type: "scatter", mode: "markers", name: "failed", x: badIdx.map((i) => s.n[i]),
        y: badIdx.map(() => 0), marker: { symbol: "x", size: 9, color: "#c0392b" } },
    ], baseLayout({ xaxis: { title: { text: "trial" } }, yaxis: { title: { text: "GFLOP/s (failed at 0)" } } }),
      plotConfig);
    const r = v.roofline;
    const traces = [];
    if (r.intensity !== null && r.gflops !== null) {
      traces.push({ type: "scatter", mode: "markers+text", name: "best schedule", x: [r.intensity], y: [r.gflops],
        text: [num(r.gflops, 1) + " GFLOP/s"], textposition: "top center", marker: { size: 11 } });
    }
    if (r.peak_gflops) {
      const xs = [Math.min(0.1, r.intensity || 0.1), Math.max(100, 10 * (r.intensity || 1))];
      traces.push({ type: "scatter", mode: "lines", name: "measured peak", x: xs, y: [r.peak_gflops, r.peak_gflops],
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
