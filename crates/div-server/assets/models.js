// The models list (`/models`) and a model's page (`/models/NAME`): its versions, and its
// evaluations as one table with a column per check and per metric. Live every 2 s.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  function cell(text, cls) {
    return div.el("td", cls ? { class: cls, text } : { text });
  }

  function bytes(n) {
    if (n == null) return "";
    const units = ["B", "kB", "MB", "GB", "TB"];
    let v = n, u = 0;
    while (v >= 1000 && u < units.length - 1) { v /= 1000; u += 1; }
    return u === 0 ? `${v} B` : `${v.toFixed(1)} ${units[u]}`;
  }

  // `sha256:9e8c48219044…`, the whole digest in the title.
  function digest(d, whole) {
    const code = div.el("code", { text: whole ? d : `${d.slice(0, 19)}…` });
    code.title = d;
    return div.el("td", { class: "digest" }, code);
  }

  function modelHref(name) {
    return `/models/${encodeURIComponent(name)}`;
  }

  async function list() {
    const answer = await div.api("/api/models");
    const rows = answer.models.map((m) => {
      const v = m.latest || {};
      return div.el("tr", { model: m.name },
        div.el("td", {}, div.el("a", { href: modelHref(m.name), text: m.name })),
        cell(String(m.versions)),
        cell(v.version != null ? `v${v.version}` : ""),
        v.digest ? digest(v.digest, false) : cell(""),
        cell(v.files != null ? String(v.files) : ""),
        cell(bytes(v.bytes)),
        cell(div.when(v.created_at)),
      );
    });
    $("model-rows").replaceChildren(...rows);
    $("empty").hidden = rows.length > 0;
  }

  // The columns an evaluation table needs: every check any evaluation has (in the order
  // first seen), then every metric (`accuracy`, or `a.b` one level down).
  function columns(evaluations) {
    const checks = [], metrics = [];
    for (const e of evaluations) {
      for (const c of e.checks || []) if (!checks.includes(c)) checks.push(c);
      for (const k of Object.keys(flat(e.metrics))) if (!metrics.includes(k)) metrics.push(k);
    }
    return { checks, metrics };
  }

  // A result's metrics as `name -> value`, nested objects one level down as `a.b`.
  function flat(metrics) {
    const out = {};
    if (!metrics || typeof metrics !== "object") return out;
    for (const [k, v] of Object.entries(metrics)) {
      if (v && typeof v === "object" && !Array.isArray(v)) {
        for (const [k2, v2] of Object.entries(v)) out[`${k}.${k2}`] = v2;
      } else out[k] = v;
    }
    return out;
  }

  function verdictCell(e, check) {
    if (!(e.checks || []).includes(check)) return cell("");
    const v = (e.verdicts || []).find((x) => x.check === check);
    if (!v) return cell(div.terminal(e.status) ? "not judged" : "pending", "pending");
    const found = v.found === undefined ? "" : ` (${JSON.stringify(v.found)})`;
    return cell(`${v.outcome}${found}`, `c-${v.outcome}`);
  }

  function evaluationTable(evaluations) {
    const { checks, metrics } = columns(evaluations);
    const head = ["Evaluation", "Version", "Run", "Status", ...checks, ...metrics, "Exit", "Spent", "Placed", "By"];
    $("evaluation-head").replaceChildren(...head.map((h, i) => {
      const th = div.el("th", { text: h });
      if (i >= 4 && i < 4 + checks.length) th.className = "check-col";
      if (i >= 4 + checks.length && i < 4 + checks.length + metrics.length) th.className = "metric-col";
      return th;
    }));
    const rows = evaluations.map((e) => {
      const m = flat(e.metrics);
      const tr = div.el("tr", { evaluation: e.id, version: String(e.version) },
        cell(e.id),
        div.el("td", {}, div.el("code", { text: `v${e.version}` })),
        div.el("td", {}, div.el("a", { href: `/runs/${encodeURIComponent(e.run)}`, text: e.run_name })),
        div.el("td", {}, div.el("span", { class: `status s-${e.status}`, text: e.status })),
        ...checks.map((c) => verdictCell(e, c)),
        ...metrics.map((k) => cell(m[k] === undefined ? "" : String(m[k]))),
        cell(e.exit_code == null ? "" : String(e.exit_code)),
        cell(div.money(e.spent_cents)),
        cell(div.when(e.created_at)),
        cell(e.placed_by || ""),
      );
      tr.id = e.id;
      if (location.hash === `#${e.id}`) tr.classList.add("target");
      return tr;
    });
    $("evaluation-rows").replaceChildren(...rows);
    $("no-evaluations").hidden = rows.length > 0;
  }

  async function model(name) {
    const m = await div.api(`/api/models/${encodeURIComponent(name)}`);
    const counts = {};
    for (const e of m.evaluations || []) counts[e.version] = (counts[e.version] || 0) + 1;
    const rows = m.versions.map((v) => div.el("tr", { version: String(v.version) },
      div.el("td", {}, div.el("code", { text: `v${v.version}` })),
      digest(v.digest, true),
      cell(String(v.files)),
      cell(bytes(v.bytes)),
      cell(div.when(v.created_at)),
      cell(v.created_by || ""),
      cell(v.from || ""),
      cell(String(counts[v.version] || 0)),
    ));
    $("version-rows").replaceChildren(...rows);
    evaluationTable(m.evaluations || []);
  }

  const parts = location.pathname.split("/").filter(Boolean);
  const name = parts.length > 1 ? decodeURIComponent(parts[1]) : null;
  if (name) {
    $("crumb").textContent = name;
    document.title = `div · ${name}`;
  }

  async function load() {
    try {
      await (name ? model(name) : list());
      div.showError(null);
      div.setLive(true);
      document.body.dataset.loaded = "true";
    } catch (e) {
      div.showError(e);
      div.setLive(false);
    }
  }

  load();
  setInterval(() => { if (!document.hidden) load(); }, 2000);
})();
