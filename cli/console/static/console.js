// The console's script: the charts of the cluster, topic and group pages (uPlot, vendored under
// /static/vendor/uplot) refreshed from /api/charts with a pause button and a time window, and the header's
// auto-refresh toggle (kept in localStorage) that reloads any page every 10 s while no form is
// being filled in. No page needs it to show its figures: they are rendered on the server.
"use strict";

(() => {
  const RELOAD_MS = 10_000;
  const REFRESH_KEY = "rmq-console-auto-refresh";
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

  function busyWithAForm() {
    const active = document.activeElement;
    return (active && ["INPUT", "SELECT", "TEXTAREA"].includes(active.tagName))
      || document.querySelector("form input[type=checkbox]:checked") !== null;
  }

  function autoRefresh() {
    const toggle = document.getElementById("auto-refresh");
    if (!toggle) return;
    let timer = null;
    const schedule = () => {
      clearTimeout(timer);
      if (!toggle.checked) return;
      timer = setTimeout(() => (busyWithAForm() ? schedule() : location.reload()), RELOAD_MS);
    };
    toggle.checked = localStorage.getItem(REFRESH_KEY) === "on";
    toggle.addEventListener("change", () => {
      localStorage.setItem(REFRESH_KEY, toggle.checked ? "on" : "off");
      schedule();
    });
    schedule();
  }

  // One chart: its series are the names of one kind of the snapshot (tps, lag or consume),
  // or only the one its element's data-only names.
  class Chart {
    constructor(element) {
      this.element = element;
      this.kind = element.dataset.kind;
      this.only = element.dataset.only;
      this.unit = element.dataset.unit;
      this.plot = null;
      this.names = "";
      this.windowS = 900;
    }

    show(snapshot, windowS) {
      const all = snapshot[this.kind] || {};
      const series = this.only ? (this.only in all ? { [this.only]: all[this.only] } : {}) : all;
      this.windowS = windowS;
      const since = Date.now() / 1000 - windowS;
      const names = Object.keys(series).sort();
      const times = [...new Set(names.flatMap((n) => series[n].map((p) => p[0])))]
        .filter((t) => t >= since).sort((a, b) => a - b);
      if (!times.length) {
        this.destroy();
        this.element.textContent = "no data yet";
        return;
      }
      const columns = names.map((name) => {
        const at = new Map(series[name]);
        return times.map((t) => (at.has(t) ? at.get(t) : null));
      });
      const data = [times, ...columns];
      if (this.plot && this.names === names.join("\n")) {
        this.plot.setData(data);
        return;
      }
      this.destroy();
      this.element.textContent = "";
      this.names = names.join("\n");
      this.plot = new uPlot({
        width: Math.max(this.element.clientWidth, 480), height: 220,
        // the x axis spans the chosen window up to now, however few samples it holds yet
        scales: { x: { time: true, range: () => [Date.now() / 1000 - this.windowS, Date.now() / 1000] } },
        series: [{}, ...names.map((name, i) => ({ label: name, stroke: COLOURS[i % COLOURS.length],
                                                  width: 1.5, spanGaps: true }))],
        axes: [{}, { label: this.unit, size: 70 }],
      }, data, this.element);
    }

    destroy() {
      if (this.plot) this.plot.destroy();
      this.plot = null;
      this.names = "";
    }
  }

  function charts() {
    const box = document.getElementById("charts");
    if (!box || typeof uPlot === "undefined") return;
    const shown = [...box.querySelectorAll(".chart[data-kind]")].map((element) => new Chart(element));
    const pause = document.getElementById("pause-charts");
    const windowPicker = document.getElementById("chart-window");
    const status = document.getElementById("chart-status");
    const intervalMs = 1000 * Number(box.dataset.interval || 10);
    let timer = null;
    let paused = false;
    let latest = 0;     // the refresh whose answer is shown: one paused or superseded on its way shows nothing

    async function refresh() {
      const mine = ++latest;
      let text;
      try {
        const response = await fetch("/api/charts", { credentials: "same-origin" });
        const snapshot = await response.json();
        if (!response.ok) throw new Error(snapshot.error || response.statusText);
        if (mine !== latest) return;
        const windowS = Number(windowPicker.value);
        for (const chart of shown) chart.show(snapshot, windowS);
        text = snapshot.error || `updated ${new Date().toLocaleTimeString()}`;
      } catch (error) {
        text = `charts not updated: ${error.message}`;
      }
      if (mine !== latest) return;
      status.textContent = text;
      if (!paused) timer = setTimeout(refresh, intervalMs);
    }

    pause.addEventListener("click", () => {
      paused = !paused;
      box.dataset.paused = paused ? "yes" : "no";
      pause.textContent = paused ? "Resume" : "Pause";
      clearTimeout(timer);
      latest += 1;      // a refresh on its way when paused shows nothing (nor schedules another)
      if (paused) status.textContent = "paused";
      else refresh();
    });
    windowPicker.addEventListener("change", () => {
      clearTimeout(timer);
      refresh();
    });
    refresh();
  }

  function confirmations() {
    // forms that destroy something ask first (data-confirm names what)
    for (const form of document.querySelectorAll("form.confirm")) {
      form.addEventListener("submit", (event) => {
        if (!confirm(form.dataset.confirm)) event.preventDefault();
      });
    }
    // the DLQ page: select every dead letter of the page, and confirm a resend
    const all = document.getElementById("select-all");
    if (all) {
      all.addEventListener("click", () => {
        for (const box of document.querySelectorAll("#dead-letters input[name=msg_id]")) box.checked = all.checked;
      });
    }
    const resend = document.getElementById("resend");
    if (resend) {
      resend.addEventListener("submit", (event) => {
        const chosen = resend.querySelectorAll("input[name=msg_id]:checked").length;
        const to = resend.elements.to.options[resend.elements.to.selectedIndex].text;
        if (!chosen || !confirm(`Resend ${chosen} dead letter(s) ${to}?`)) event.preventDefault();
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    autoRefresh();
    charts();
    confirmations();
  });
})();
