// Shared helpers. Everything a run provides is put in the page with textContent, never
// innerHTML: a name, a log line or a result holding markup stays text.
"use strict";

const div = {
  el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else if (k === "href") e.setAttribute("href", v);
      else e.dataset[k] = v;
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  },

  money(cents) {
    if (cents == null) return "";
    const sign = cents < 0 ? "-" : "";
    const c = Math.abs(cents);
    return `${sign}$${Math.floor(c / 100)}.${String(c % 100).padStart(2, "0")}`;
  },

  duration(seconds) {
    if (seconds == null) return "";
    const s = Math.floor(seconds);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h > 0) return `${h}h ${m}m`;
    if (m > 0) return `${m}m ${r}s`;
    return `${r}s`;
  },

  when(rfc3339) {
    if (!rfc3339) return "";
    const d = new Date(rfc3339);
    if (isNaN(d)) return rfc3339;
    return d.toLocaleString();
  },

  // Whether a run has ended: every status but queued and running (succeeded, failed,
  // canceled, stopped_by_org, hit_ceiling, and any a newer control plane adds), as
  // div-api's `RunStatus::is_terminal` says.
  terminal(status) {
    return !["queued", "running"].includes(status);
  },

  // `n thing` or `n things`.
  count(n, one, many) {
    return `${n} ${n === 1 ? one : (many || `${one}s`)}`;
  },

  // The SKU and how many: `h100 × 2`; a CPU-only run is `cpu`, with no `× 0`.
  hardware(r) {
    return r.sku === "cpu" || !r.gpus ? r.sku : `${r.sku} × ${r.gpus}`;
  },

  // `text` cut in its middle to at most `max` characters, keeping its start and its end
  // (where commands that begin alike differ): `pip install -q -r req… python train.py`.
  middle(text, max) {
    const chars = [...(text || "")];
    if (chars.length <= max) return chars.join("");
    const tail = Math.floor((max - 1) / 2);
    const head = max - 1 - tail;
    return `${chars.slice(0, head).join("")}…${chars.slice(chars.length - tail).join("")}`;
  },

  // GET (or POST) JSON from the dashboard's own API; a problem is thrown as an Error whose
  // message the page shows as text.
  async api(path, options) {
    const resp = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
    if (resp.status === 401) {
      throw new Error("The dashboard's session is missing or over: sign in again (or, on your own machine, open the link `div dashboard` prints).");
    }
    const text = await resp.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
    if (!resp.ok) {
      const msg = body && body.error && body.error.message ? body.error.message : `HTTP ${resp.status}`;
      throw new Error(msg);
    }
    return body;
  },

  showError(e) {
    const p = document.getElementById("error");
    if (!p) return;
    if (e) { p.textContent = String(e.message || e); p.hidden = false; }
    else { p.hidden = true; p.textContent = ""; }
  },

  setLive(on) {
    const l = document.getElementById("live");
    if (l) l.classList.toggle("off", !on);
  },

  // Who is signed in (`alice · member`), and the button that signs out: the session ends
  // on the server, and the page goes back to the sign-in page (the owner's dashboard, to
  // the page that says to run `div dashboard` again).
  async session() {
    const who = document.getElementById("who");
    const out = document.getElementById("signout");
    if (!who || !out) return null;
    try {
      const me = await div.api("/api/session");
      who.textContent = `${me.name} · ${me.role}`;
      document.body.dataset.member = me.name;
      document.body.dataset.role = me.role;
      out.hidden = false;
      out.addEventListener("click", async () => {
        try { await div.api("/api/session", { method: "DELETE" }); } catch (_) { /* gone already */ }
        location.reload();
      });
      return me;
    } catch (e) {
      return null;
    }
  },
};

document.addEventListener("DOMContentLoaded", () => { div.session(); });
