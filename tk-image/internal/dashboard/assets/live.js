// Progressive enhancement of the dashboard: every page reads without it.
// 1. Live updates: the server-sent event stream names what changed; the
//    page reloads its live region (#live) from the server, which renders
//    it as on a full load, and once each time the stream (re)opens. Only
//    one reload runs at a time.
// 2. Actions post in the background and show the answer next to the
//    clicked button, so a refusal (RBAC) is read in place.
// 3. Times left count down.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  var src = document.body.getAttribute("data-events");
  var busy = false, again = false;

  function partialURL() {
    var u = new URL(window.location.href);
    u.searchParams.set("partial", "1");
    return u.toString();
  }

  var stale = document.getElementById("stale");
  function banner(text) {
    if (!stale) return;
    stale.hidden = text === null;
    if (text !== null) stale.textContent = text;
    if (live) live.classList.toggle("is-stale", text !== null);
  }
  function clock(d) { return d.toISOString().slice(11, 19) + " UTC"; }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(partialURL(), { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          document.body.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  if (live && live.hasAttribute("data-live") && src && window.EventSource) {
    var es = new EventSource(src);
    // A page left for another (or kept in the back/forward cache) closes
    // its stream: the browser allows six connections to the dashboard,
    // and streams of pages no longer shown held them all, so that a
    // click waited for one. A page shown again from that cache reloads,
    // which opens a new stream and catches up.
    window.addEventListener("pagehide", function () { es.close(); });
    window.addEventListener("pageshow", function (ev) { if (ev.persisted) window.location.reload(); });
    // A change between the page's rendering and the stream's start (or
    // while a dropped stream reconnects) was never sent: catch up on each
    // open.
    var apiDown = false, dashboardDown = null;
    es.addEventListener("open", function () {
      dashboardDown = null;
      if (!apiDown) banner(null);
      if (state) state.textContent = apiDown ? "stale" : "live";
      refresh();
    });
    es.addEventListener("error", function () {
      if (state) state.textContent = "reconnecting";
      if (!dashboardDown) dashboardDown = new Date();
      banner("The dashboard has not answered since " + clock(dashboardDown) +
        " (is tk-image dashboard still running?): this page shows what it showed then.");
    });
    es.addEventListener("change", refresh);
    // The API server's state: while it does not answer, a banner says
    // since when and the live region is marked stale; once it answers
    // again the page catches up.
    es.addEventListener("health", function (ev) {
      var h = JSON.parse(ev.data);
      apiDown = !h.ok;
      if (apiDown) {
        banner("The API server has not answered since " + clock(new Date(h.since)) +
          ": this page shows what the dashboard last saw, not the cluster now. (" + h.error + ")");
      } else {
        banner(null);
        refresh();
      }
      if (state) state.textContent = apiDown ? "stale" : "live";
    });
  }

  // 3. A time left (a minimum age) counts down between updates, spelled
  //    as the server spells it (TimeLeft).
  function left(ms) {
    if (ms <= 0) return "0s (due now)";
    var m = Math.round(ms / 60000);
    if (ms < 60000) return Math.round(ms / 1000) + "s";
    var h = Math.floor(m / 60);
    return h > 0 ? h + "h" + (m % 60 ? (m % 60) + "m" : "") : m + "m";
  }
  function tick() {
    document.querySelectorAll("time[data-until]").forEach(function (t) {
      var until = Date.parse(t.getAttribute("data-until"));
      if (!isNaN(until)) t.textContent = left(until - Date.now());
    });
  }
  setInterval(tick, 15000);

  // Each button is its own form, posting to its own action URL (the
  // form's action attribute: read as written, since a form's .action
  // property is the page's URL when the attribute is missing, and a
  // submitter's .formAction is too). The answer goes in the output of
  // the button's group, next to it, and is kept for two minutes by the
  // group's id: a live update redraws the group, and the answer stays.
  var answers = {}, seq = 0;
  function show(group) {
    var a = answers[group.id], out = group.querySelector("output.answer");
    if (!a || !out) return;
    if (Date.now() - a.at > 120000) { delete answers[group.id]; return; }
    out.textContent = a.text;
    out.className = "answer " + (a.pending ? "pending" : a.ok ? "done" : "refused");
    out.setAttribute("role", a.ok || a.pending ? "status" : "alert");
    // Which click this answers, for a reader (and a test) to tell a
    // new answer from the last one.
    out.setAttribute("data-seq", String(a.seq));
    out.setAttribute("data-action", a.action);
    out.hidden = false;
  }
  function showAll() {
    Object.keys(answers).forEach(function (id) {
      var g = document.getElementById(id);
      if (g) show(g);
    });
  }
  if (live) new MutationObserver(showAll).observe(live, { childList: true });

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var group = form.closest && form.closest(".actions[id]");
    if (!group || form.method.toLowerCase() !== "post") return;
    ev.preventDefault();
    var buttons = group.querySelectorAll("button");
    var enabled = [];
    buttons.forEach(function (b) { if (!b.disabled) { enabled.push(b); b.disabled = true; } });
    var button = form.querySelector("button"), action = button ? button.getAttribute("data-action") : "";
    var n = ++seq;
    answers[group.id] = { text: (button ? button.textContent : "Action") + ": sending…", pending: true, at: Date.now(), action: action, seq: n };
    show(group);
    var status = 0;
    fetch(form.getAttribute("action"), {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      headers: { "Accept": "application/json" },
      credentials: "same-origin"
    })
      .then(function (r) { status = r.status; return r.text(); })
      .then(function (body) {
        var res;
        try { res = JSON.parse(body); } catch (e) {
          res = { ok: false, message: "The dashboard answered HTTP " + status + " without an account of the action: " + body.slice(0, 200) };
        }
        return res;
      }, function (err) {
        return { ok: false, message: "The action did not reach the dashboard (" + err + "): is tk-image dashboard still running?" };
      })
      .then(function (res) {
        answers[group.id] = { text: res.message, ok: res.ok, at: Date.now(), action: action, seq: n };
        enabled.forEach(function (b) { b.disabled = false; });
        // A live update may have drawn the group anew meanwhile.
        var g = document.getElementById(group.id) || group;
        show(g);
      });
  });
})();
