// A run's page: overview (what was typed, what the container was told, the replay, the
// timeline, spend, checks and result), the log (live, ANSI colours, tail first, earlier
// parts on demand) and the telemetry charts (laid out by the run's telemetry.toml).
"use strict";

(function () {
  const id = decodeURIComponent(location.pathname.split("/")[2] || "");
  const $ = (x) => document.getElementById(x);
  let run = null;

  // ---- tabs
  let tab = "overview";
  function show(name) {
    tab = name;
    for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.tab === name);
    for (const p of ["overview", "log", "telemetry"]) $(p).hidden = p !== name;
    if (name === "log") log.start();
    if (name === "telemetry") charts.load();
    if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  }
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => show(b.dataset.tab));

  // ---- overview
  function timeline(r, signalled) {
    const items = [["queued", r.created_at], ["started", r.started_at]];
    if (signalled) items.push(["signalled", signalled]);
    items.push(["ended", r.ended_at]);
    $("timeline").replaceChildren(...items.map(([what, at]) =>
      div.el("li", { class: at ? "done" : "pending" },
        div.el("span", { class: "what", text: what }),
        div.el("span", { class: "at", text: at ? div.when(at) : "not yet" }))));
  }

  function spend(r) {
    const fill = $("spend-fill");
    if (r.max_spend_cents != null && r.max_spend_cents > 0) {
      const pct = Math.min(100, Math.round((100 * r.spent_cents) / r.max_spend_cents));
      fill.style.width = `${pct}%`;
      fill.classList.toggle("full", pct >= 100);
      $("spend-text").textContent = `${div.money(r.spent_cents)} of ${div.money(r.max_spend_cents)} (${pct}%) at ${div.money(r.cents_per_hour)}/h`;
    } else {
      fill.style.width = "0%";
      $("spend-text").textContent = `${div.money(r.spent_cents)}, no ceiling, at ${div.money(r.cents_per_hour)}/h`;
    }
  }

  function checks(r, result) {
    const verdicts = (result && result.verdicts) || r.verdicts || [];
    const list = r.checks.map((c) => {
      const v = verdicts.find((v) => v.check === c);
      const outcome = v ? v.outcome : "pending";
      return div.el("li", { class: `check c-${outcome}`, outcome },
        div.el("span", { class: "outcome", text: outcome }),
        div.el("code", { text: c }),
        v && v.found !== undefined ? div.el("span", { class: "found", text: ` found ${JSON.stringify(v.found)}` }) : null);
    });
    if (list.length === 0) list.push(div.el("li", { class: "note", text: "No checks." }));
    $("checks").replaceChildren(...list);
  }

  // The Exit code row: the code the run exited with, or why it has none.
  function exitText(r) {
    if (r.exit_code != null) return String(r.exit_code);
    if (r.status === "queued") return "not started yet";
    if (r.status === "running") return "not yet: it is running";
    switch (r.status) {
      case "hit_ceiling": return "none: it was killed when it reached its ceiling";
      case "canceled": return "none: it was stopped before it exited";
      case "stopped_by_org": return "none: the org stopped it before it exited";
      default: return "none: it did not exit on its own";
    }
  }

  // The Reason row: the run's reason where it has one, else what its status means.
  function reasonText(r) {
    if (r.reason) return r.reason;
    switch (r.status) {
      case "hit_ceiling":
        return r.max_spend_cents != null
          ? `it reached its ${div.money(r.max_spend_cents)} ceiling after ${div.duration(r.duration_seconds)} (${div.money(r.spent_cents)} spent)`
          : `it reached its ceiling after ${div.duration(r.duration_seconds)} (${div.money(r.spent_cents)} spent)`;
      case "canceled": return "it was stopped (div stop, or Stop here)";
      case "stopped_by_org": return "the org stopped it";
      case "succeeded": return "it exited 0";
      case "failed": return r.exit_code != null ? `it exited ${r.exit_code}` : "it failed";
      case "queued": return r.queue && r.queue.reason ? `queued: ${r.queue.reason}` : "queued";
      default: return "";
    }
  }

  // The Image row: the image and its digest where one was pulled, or this machine's own
  // system where it stands in for the default image.
  function imageText(r, ranIn) {
    if (ranIn && ranIn.host) return `this machine's own system (standing in for ${ranIn.stands_in_for || r.image}; DIVERGENT_DEFAULT_IMAGE=host, nothing pulled)`;
    if (ranIn && ranIn.image) return `${ranIn.image} (${ranIn.digest})`;
    if (ranIn && ranIn.problem) return `${r.image} (${ranIn.problem})`;
    return r.image;
  }

  function overview(detail) {
    const r = detail.run;
    run = r;
    document.title = `div · ${r.name}`;
    $("crumb").textContent = r.name;
    $("name").textContent = r.name;
    $("status").textContent = r.status;
    $("status").className = `status s-${r.status}`;
    document.body.dataset.status = r.status;
    $("typed").textContent = r.entrypoint;
    $("told").textContent = r.command;
    $("replay").textContent = detail.replay;
    $("project").textContent = r.project;
    $("placed-by").textContent = r.placed_by || "";
    $("sku").textContent = `${div.hardware(r)} · ${div.count(r.cores, "core")} · ${r.memory_gib} GiB`;
    $("image").textContent = imageText(r, detail.ran_in);
    if (r.model) {
      // An eval run: the model version it judges, and the evaluation it makes.
      const href = `/models/${encodeURIComponent(r.model.name)}`;
      $("model-link").textContent = `${r.model.name}:v${r.model.version}`;
      $("model-link").setAttribute("href", href);
      $("model-digest").textContent = r.model.digest;
      $("evaluation-link").textContent = r.model.evaluation;
      $("evaluation-link").setAttribute("href", `${href}#${encodeURIComponent(r.model.evaluation)}`);
      $("model-label").hidden = false;
      $("model-fact").hidden = false;
    }
    $("code").textContent = r.code ? `${r.code.volume}/${r.code.path}` : "none (--no-upload)";
    $("exit").textContent = exitText(r);
    $("reason").textContent = reasonText(r);
    timeline(r, detail.signalled_at);
    spend(r);
    checks(r, detail.result);
    const res = detail.result || {};
    $("result-problem").textContent = res.problem || "";
    $("result").textContent = res.result === undefined || res.result === null ? "" : JSON.stringify(res.result, null, 2);
    $("stop").hidden = div.terminal(r.status);
    $("download").setAttribute("href", `/api/runs/${encodeURIComponent(r.id)}/log?download=1`);
    document.body.dataset.loaded = "true";
  }

  async function refresh() {
    try {
      overview(await div.api(`/api/runs/${encodeURIComponent(id)}`));
      div.showError(null);
      div.setLive(!div.terminal(run.status));
    } catch (e) {
      div.showError(e);
      div.setLive(false);
    }
  }

  $("copy").addEventListener("click", async () => {
    const text = $("replay").textContent;
    try {
      await navigator.clipboard.writeText(text);
      $("copied").textContent = "copied";
    } catch (_) {
      // No clipboard (an insecure context or no permission): select it for Ctrl-C.
      const range = document.createRange();
      range.selectNodeContents($("replay"));
      const sel = getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      $("copied").textContent = "selected: press Ctrl-C";
    }
  });

  // ---- stop, with a confirmation
  $("stop").addEventListener("click", () => {
    $("confirm-name").textContent = run ? run.name : id;
    $("confirm").showModal();
  });
  $("confirm-no").addEventListener("click", () => $("confirm").close());
  $("confirm-yes").addEventListener("click", async () => {
    $("confirm").close();
    $("stop").disabled = true;
    try {
      await div.api(`/api/runs/${encodeURIComponent(id)}/stop`, { method: "POST" });
      await refresh();
    } catch (e) {
      div.showError(e);
    } finally {
      $("stop").disabled = false;
    }
  });

  // ---- the log
  const TAIL = 256 * 1024;      // the first load: the last 256 KiB
  const EARLIER = 256 * 1024;   // each "Load earlier"
  const KEEP = 4 * 1024 * 1024; // at most this much text stays on the page while following
  const view = $("logview");
  const log = {
    started: false,
    start: 0,       // the first byte on the page
    end: 0,         // one past the last byte on the page
    decoder: new TextDecoder("utf-8"),
    ansi: { fg: null, bg: null, bold: false, pending: "" },
    busy: false,

    atBottom() {
      return view.scrollTop + view.clientHeight >= view.scrollHeight - 4;
    },

    async fetchRange(range) {
      const resp = await fetch(`/api/runs/${encodeURIComponent(id)}/log`, {
        credentials: "same-origin",
        headers: { Range: range },
      });
      if (resp.status === 416) {
        const m = /\/(\d+)$/.exec(resp.headers.get("content-range") || "");
        return { from: null, size: m ? Number(m[1]) : null, bytes: new Uint8Array() };
      }
      if (!resp.ok) throw new Error(`the log could not be read (HTTP ${resp.status})`);
      const m = /bytes (\d+)-(\d+)\/(\d+)/.exec(resp.headers.get("content-range") || "");
      const bytes = new Uint8Array(await resp.arrayBuffer());
      return { from: m ? Number(m[1]) : 0, size: m ? Number(m[3]) : bytes.length, bytes };
    },

    info(size) {
      const shown = this.end - this.start;
      $("log-info").textContent = this.start > 0
        ? `showing the last ${shown.toLocaleString()} of ${size.toLocaleString()} bytes`
        : `${size.toLocaleString()} bytes`;
      $("earlier").hidden = this.start === 0;
      view.dataset.start = String(this.start);
      view.dataset.end = String(this.end);
    },

    async start() {
      if (this.started) return;
      this.started = true;
      try {
        const part = await this.fetchRange(`bytes=-${TAIL}`);
        if (part.from != null) {
          this.start = part.from;
          this.end = part.from + part.bytes.length;
          view.append(this.chunk(part.bytes, part.from, this.ansi, this.decoder, true));
          view.scrollTop = view.scrollHeight;
          this.info(part.size);
        }
        // When the tail was on the page, for `cargo xtask bench dashboard`.
        view.dataset.tailMs = String(Math.round(performance.now()));
      } catch (e) { div.showError(e); }
      this.poll();
    },

    async poll() {
      for (;;) {
        if (!this.busy) {
          this.busy = true;
          try {
            const part = await this.fetchRange(`bytes=${this.end}-`);
            if (part.from != null && part.bytes.length > 0) {
              const follow = this.atBottom();
              view.append(this.chunk(part.bytes, part.from, this.ansi, this.decoder, true));
              this.end = part.from + part.bytes.length;
              this.trim();
              if (follow) view.scrollTop = view.scrollHeight;
              this.info(part.size);
              this.busy = false;
              continue; // more may be waiting
            }
            if (part.size != null) this.info(part.size);
          } catch (e) { div.showError(e); }
          this.busy = false;
        }
        if (run && div.terminal(run.status) && this.ended) return;
        if (run && div.terminal(run.status)) this.ended = true; // one more read after the end
        await new Promise((r) => setTimeout(r, 700));
      }
    },

    // Keep the page light while a busy run prints: drop whole chunks from the top.
    trim() {
      while (this.end - this.start > KEEP && view.children.length > 1) {
        const first = view.firstElementChild;
        first.remove();
        this.start = Number(view.firstElementChild.dataset.from);
      }
    },

    async earlier() {
      if (this.start === 0) return;
      const from = Math.max(0, this.start - EARLIER);
      const keep = view.scrollHeight - view.scrollTop;
      try {
        const part = await this.fetchRange(`bytes=${from}-${this.start - 1}`);
        if (part.from == null) return;
        const ansi = { fg: null, bg: null, bold: false, pending: "" };
        view.prepend(this.chunk(part.bytes, part.from, ansi, new TextDecoder("utf-8"), false));
        this.start = part.from;
        view.scrollTop = view.scrollHeight - keep;
        this.info(part.size);
      } catch (e) { div.showError(e); }
    },

    // One part of the log as a block of spans, SGR colours applied, other escapes dropped.
    chunk(bytes, from, ansi, decoder, stream) {
      const block = div.el("div", { class: "chunk", from: String(from), bytes: String(bytes.length) });
      let text = ansi.pending + decoder.decode(bytes, { stream });
      ansi.pending = "";
      // An escape cut at the end of this part waits for the next one.
      const cut = text.lastIndexOf("\x1b");
      if (stream && cut >= 0 && !/^\x1b(\[[0-9;?]*[ -\/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])/.test(text.slice(cut)) && text.length - cut < 64) {
        ansi.pending = text.slice(cut);
        text = text.slice(0, cut);
      }
      const re = /\x1b\[([0-9;]*)m|\x1b\[[0-9;?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\r(?!\n)/g;
      let last = 0;
      let m;
      const emit = (s) => {
        if (!s) return;
        const span = document.createElement("span");
        span.textContent = s;
        const cls = [];
        if (ansi.fg != null) cls.push(`fg${ansi.fg}`);
        if (ansi.bg != null) cls.push(`bg${ansi.bg}`);
        if (ansi.bold) cls.push("b");
        if (cls.length) span.className = cls.join(" ");
        block.append(span);
      };
      while ((m = re.exec(text)) !== null) {
        emit(text.slice(last, m.index));
        last = re.lastIndex;
        if (m[1] === undefined) continue;
        const codes = m[1] === "" ? [0] : m[1].split(";").map(Number);
        for (let i = 0; i < codes.length; i++) {
          const c = codes[i];
          if (c === 0) { ansi.fg = null; ansi.bg = null; ansi.bold = false; }
          else if (c === 1) ansi.bold = true;
          else if (c === 22) ansi.bold = false;
          else if (c >= 30 && c <= 37) ansi.fg = c - 30;
          else if (c >= 90 && c <= 97) ansi.fg = c - 90 + 8;
          else if (c === 39) ansi.fg = null;
          else if (c >= 40 && c <= 47) ansi.bg = c - 40;
          else if (c >= 100 && c <= 107) ansi.bg = c - 100 + 8;
          else if (c === 49) ansi.bg = null;
          else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
            const n = codes[i + 2];
            if (n >= 0 && n < 16) { if (c === 38) ansi.fg = n; else ansi.bg = n; }
            i += 2;
          } else if ((c === 38 || c === 48) && codes[i + 1] === 2) i += 4;
        }
      }
      emit(text.slice(last));
      return block;
    },
  };
  $("earlier").addEventListener("click", () => log.earlier());

  // ---- telemetry
  // The steps between the x axis's ticks uPlot may pick for an x of whole numbers (steps):
  // 1, 2 and 5 times a power of ten, so that no tick falls at 2.5. Any other x keeps uPlot's.
  const WHOLE_INCRS = [];
  for (let e = 0; e <= 15; e++) for (const m of [1, 2, 5]) WHOLE_INCRS.push(m * 10 ** e);
  const whole = (xs) => xs.length > 0 && xs.every((x) => x == null || Number.isInteger(x));

  const charts = {
    drawn: new Map(),
    timer: null,
    // Each chart fills the width of its panel, and follows it when the window changes.
    resized: new ResizeObserver(() => {
      for (const d of charts.drawn.values()) {
        const width = d.panel.clientWidth;
        if (width > 0 && width !== d.plot.width) d.plot.setSize({ width, height: d.plot.height });
      }
    }),
    async load() {
      try {
        const t = await div.api(`/api/runs/${encodeURIComponent(id)}/charts`);
        let info = `${t.points} points · laid out by ${t.layout}`;
        if (t.bad_lines) info += ` · ${t.bad_lines} lines were not JSON`;
        if (t.problem) info += ` · ${t.problem}`;
        $("telemetry-info").textContent = info;
        this.draw(t.charts);
      } catch (e) { div.showError(e); }
      clearTimeout(this.timer);
      if (tab === "telemetry" && !(run && div.terminal(run.status) && this.settled)) {
        if (run && div.terminal(run.status)) this.settled = true;
        this.timer = setTimeout(() => this.load(), 2000);
      }
    },
    data(chart) {
      const xs = [...new Set(chart.series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
      const index = new Map(xs.map((x, i) => [x, i]));
      const ys = chart.series.map((s) => {
        const y = new Array(xs.length).fill(null);
        for (const [x, v] of s.points) y[index.get(x)] = v;
        return y;
      });
      return [xs, ...ys];
    },
    draw(list) {
      const box = $("charts");
      const keys = new Set();
      list.forEach((c, i) => {
        const data = this.data(c);
        // A chart whose x stops being whole numbers is drawn again, with uPlot's own ticks.
        const steps = whole(data[0]);
        const key = `${i}:${c.title}:${steps}`;
        keys.add(key);
        const points = c.series.reduce((n, s) => n + s.points.length, 0);
        let d = this.drawn.get(key);
        if (!d) {
          const panel = div.el("figure", { class: "chart", title: c.title, series: c.series.map((s) => s.name).join("\n") },
            div.el("figcaption", { text: c.title }));
          box.append(panel);
          const width = Math.max(320, panel.clientWidth);
          const palette = ["#2f6fde", "#e0592a", "#2aa36b", "#a243c9", "#c9a227", "#1aa3b8"];
          const plot = new uPlot({
            width,
            height: 240,
            scales: { x: { time: false } },
            axes: [steps ? { label: c.x, incrs: WHOLE_INCRS } : { label: c.x }, {}],
            series: [{ label: c.x }, ...c.series.map((s, j) => ({
              label: s.name, stroke: palette[j % palette.length], width: 2, spanGaps: true,
            }))],
          }, data, panel);
          d = { panel, plot };
          // The instance, for whoever reads the chart (the tests read its ticks).
          panel.uplot = plot;
          this.drawn.set(key, d);
          this.resized.observe(panel);
        } else {
          d.plot.setData(data);
        }
        d.panel.dataset.points = String(points);
      });
      for (const [key, d] of this.drawn) {
        if (!keys.has(key)) {
          this.resized.unobserve(d.panel);
          d.plot.destroy();
          d.panel.remove();
          this.drawn.delete(key);
        }
      }
      box.dataset.charts = String(list.length);
      if (list.length === 0 && !box.querySelector(".note")) {
        box.append(div.el("p", { class: "note", text: "No telemetry yet: a run writes points to telemetry.jsonl." }));
      } else if (list.length > 0) {
        for (const n of box.querySelectorAll(".note")) n.remove();
      }
    },
  };

  async function loop() {
    await refresh();
    setTimeout(loop, run && div.terminal(run.status) ? 10000 : 1500);
  }
  addEventListener("hashchange", () => {
    const wanted = location.hash.replace("#", "");
    if (["overview", "log", "telemetry"].includes(wanted) && wanted !== tab) show(wanted);
  });
  loop().then(() => {
    const wanted = location.hash.replace("#", "");
    if (["log", "telemetry"].includes(wanted)) show(wanted);
  });
})();
