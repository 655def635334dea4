// The team's dashboard sign-in: the token goes once, in the body of a POST (never in a URL);
// the answer sets the session's cookie (HttpOnly: no script reads it), and the page the member
// asked for loads with it.
"use strict";

(function () {
  const form = document.getElementById("signin");
  const error = document.getElementById("error");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = document.getElementById("token");
    const token = input.value.trim();
    error.hidden = true;
    try {
      const resp = await fetch("/api/session", {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ token }),
      });
      if (!resp.ok) {
        let message = `HTTP ${resp.status}`;
        try {
          const body = await resp.json();
          if (body && body.error && body.error.message) message = body.error.message;
        } catch (_) { /* not JSON */ }
        throw new Error(message);
      }
      input.value = "";
      location.reload();
    } catch (e) {
      error.textContent = String(e.message || e);
      error.hidden = false;
    }
  });
})();
