// The runs list: filters, keyset pages (the server's cursor), live every 2 s.
"use strict";

(function () {
  const rows = document.getElementById("rows");
  const params = new URLSearchParams(location.search);
  const state = {
    project: params.get("project") || "",
    status: params.get("status") || "",
    // The cursors of the pages before this one; the current page's cursor last.
    cursors: params.get("cursor") ? [params.get("cursor")] : [""],
    next: null,
  };
  document.getElementById("project").value = state.project;
  document.getElementById("status").value = state.status;
  const projects = new Set();

  // How much of an entrypoint a row shows, cut in its middle past that.
  const ENTRY_CHARS = 64;

  function cell(text, cls) {
    return div.el("td", cls ? { class: cls, text } : { text });
  }

  // The entrypoint's cell: its start and end, the whole of it in the title.
  function entry(text) {
    const code = div.el("code", { text: div.middle(text, ENTRY_CHARS) });
    code.title = text;
    return div.el("td", { class: "entry" }, code);
  }

  function row(r) {
    const passed = (r.verdicts || []).filter((v) => v.outcome === "passed").length;
    const judged = (r.verdicts || []).length;
    const checks = (r.checks || []).length;
    let checkText = "";
    if (checks > 0) {
      checkText = judged > 0 ? `${passed}/${checks} passed` : `${checks} pending`;
      if (judged > 0 && passed < checks) checkText += ` · ${checks - passed} missed`;
    }
    const name = div.el("td", {}, div.el("a", { href: `/runs/${encodeURIComponent(r.id)}`, text: r.name }));
    const spend = r.max_spend_cents != null
      ? `${div.money(r.spent_cents)} / ${div.money(r.max_spend_cents)}`
      : `${div.money(r.spent_cents)} / none`;
    const tr = div.el("tr", { run: r.id, status: r.status },
      name,
      cell(r.project),
      div.el("td", {}, div.el("span", { class: `status s-${r.status}`, text: r.status })),
      entry(r.entrypoint),
      cell(div.hardware(r)),
      cell(div.when(r.started_at || r.created_at)),
      cell(div.duration(r.duration_seconds)),
      cell(spend),
      cell(r.exit_code == null ? "" : String(r.exit_code)),
      cell(checkText),
      cell(r.placed_by || ""),
    );
    return tr;
  }

  function url() {
    const q = new URLSearchParams();
    if (state.project) q.set("project", state.project);
    if (state.status) q.set("status", state.status);
    const cursor = state.cursors[state.cursors.length - 1];
    if (cursor) q.set("cursor", cursor);
    q.set("limit", "50");
    return q;
  }

  async function load() {
    const q = url();
    try {
      const list = await div.api(`/api/runs?${q}`);
      div.showError(null);
      div.setLive(true);
      rows.replaceChildren(...list.runs.map(row));
      for (const r of list.runs) {
        if (!projects.has(r.project)) {
          projects.add(r.project);
          document.getElementById("projects").append(div.el("option", { text: r.project }));
        }
      }
      document.getElementById("empty").hidden = list.runs.length > 0;
      state.next = list.next_cursor || null;
      document.getElementById("older").disabled = !state.next;
      document.getElementById("newer").disabled = state.cursors.length <= 1;
      document.getElementById("page").textContent = `page ${state.cursors.length}`;
      if (!document.body.dataset.loaded) {
        // When the first rows were on the page, for `cargo xtask bench dashboard`.
        document.body.dataset.firstRowsMs = String(Math.round(performance.now()));
      }
      document.body.dataset.loaded = "true";
    } catch (e) {
      div.showError(e);
      div.setLive(false);
    }
  }

  function remember() {
    const q = url();
    q.delete("limit");
    history.replaceState(null, "", q.toString() ? `/?${q}` : "/");
  }

  document.getElementById("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.project = document.getElementById("project").value.trim();
    state.status = document.getElementById("status").value;
    state.cursors = [""];
    remember();
    load();
  });
  document.getElementById("older").addEventListener("click", () => {
    if (!state.next) return;
    state.cursors.push(state.next);
    remember();
    load();
  });
  document.getElementById("newer").addEventListener("click", () => {
    if (state.cursors.length <= 1) return;
    state.cursors.pop();
    remember();
    load();
  });

  load();
  setInterval(() => { if (!document.hidden) load(); }, 2000);
})();
