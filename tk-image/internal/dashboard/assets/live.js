// Progressive enhancement of the dashboard: every page reads without it.
// 1. Live updates: the server-sent event stream names what changed; the
//    page reloads its live region (#live) from the server, which renders
//    it as on a full load, and once each time the stream (re)opens. Only
//    one reload runs at a time.
// 2. Actions post in the background and show the answer in #flash, so a
//    refusal (RBAC) is read in place.
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
    // A change between the page's rendering and the stream's start (or
    // while a dropped stream reconnects) was never sent: catch up on each
    // open.
    es.addEventListener("open", function () {
      if (state) state.textContent = "live";
      refresh();
    });
    es.addEventListener("error", function () { if (state) state.textContent = "reconnecting"; });
    es.addEventListener("change", refresh);
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

  var flash = document.getElementById("flash");
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!flash || form.method.toLowerCase() !== "post") return;
    ev.preventDefault();
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (b) { b.disabled = true; });
    // The button's formaction, else the form's action.
    var action = (ev.submitter && ev.submitter.formAction) || form.action;
    fetch(action, {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      headers: { "Accept": "application/json" },
      credentials: "same-origin"
    })
      .then(function (r) { return r.json(); })
      .then(function (res) {
        flash.textContent = res.message;
        flash.className = "flash " + (res.ok ? "done" : "refused");
      })
      .catch(function (err) {
        flash.textContent = "The action did not reach the dashboard: " + err;
        flash.className = "flash refused";
      })
      .then(function () {
        flash.hidden = false;
        buttons.forEach(function (b) { b.disabled = false; });
      });
  });
})();
