// hookgate console: the token in sessionStorage, sent in the Authorization
// header of every request; page actions; the overview's charts.
(function () {
  "use strict";
  var KEY = "hookgate-token";
  var $ = function (id) { return document.getElementById(id); };

  function token() { return sessionStorage.getItem(KEY) || ""; }
  function authHeaders(extra) {
    var h = extra || {};
    h.Authorization = "Bearer " + token();
    return h;
  }

  function showError(msg) {
    var e = $("error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  function showApp(on) {
    $("login").hidden = on;
    $("app").hidden = !on;
    $("nav").hidden = !on;
  }

  function load(url) {
    showError("");
    return htmx.ajax("GET", url, { target: "#main" });
  }

  function eventsPage() {
    var main = $("main");
    main.replaceChildren($("events-page").content.cloneNode(true));
    htmx.process(main);
  }

  // The message of an error answer ({"error":{"message":…}} or text).
  function message(xhr) {
    try {
      var j = JSON.parse(xhr.responseText);
      if (j && j.error && j.error.message) { return j.error.message; }
    } catch (e) { /* not JSON */ }
    return "HTTP " + xhr.status;
  }

  // why is the gateway's message, if any.
  function refused(status, why) {
    sessionStorage.removeItem(KEY);
    showApp(false);
    showError(status === 403 ? "This token is not an operator's (api.tokens)." :
      "The token was refused" + (why ? ": " + why : "") + ".");
  }

  document.addEventListener("htmx:configRequest", function (evt) {
    evt.detail.headers.Authorization = "Bearer " + token();
  });

  document.addEventListener("htmx:responseError", function (evt) {
    var xhr = evt.detail.xhr;
    if (xhr.status === 401 || (xhr.status === 403 && evt.detail.requestConfig.path.indexOf("/console/f/") === 0)) {
      refused(xhr.status, message(xhr));
      return;
    }
    showError(message(xhr));
  });

  document.addEventListener("htmx:sendError", function () { showError("The gateway did not answer."); });

  // An action (pause, resume, replay) refreshes the part it names.
  document.addEventListener("htmx:afterRequest", function (evt) {
    var elt = evt.detail.elt;
    var target = elt && elt.getAttribute && elt.getAttribute("data-refresh");
    if (target && evt.detail.successful && $(target)) {
      htmx.trigger($(target), "refresh");
    }
  });

  document.addEventListener("htmx:afterSwap", function () { drawCharts(); });

  document.addEventListener("change", function (evt) {
    if (evt.target.id === "select-all") {
      document.querySelectorAll(".dead-select").forEach(function (c) { c.checked = evt.target.checked; });
    }
  });

  document.addEventListener("click", function (evt) {
    var id = evt.target.id;
    if (id === "logout") {
      sessionStorage.removeItem(KEY);
      $("main").replaceChildren();
      showApp(false);
    } else if (id === "nav-events") {
      eventsPage();
    } else if (id === "retry-selected") {
      retrySelected();
    } else if (id === "retry-all") {
      retryAll();
    }
  });

  function retryResult(msg) { $("retry-result").textContent = msg; }

  function reloadDead(route, msg) {
    load("/console/f/dead?route=" + encodeURIComponent(route)).then(function () {
      if ($("retry-result")) { retryResult(msg); }
    });
  }

  // The selected dead letters, one POST /v1/deliveries/{id}/retry each (a
  // page holds at most 100).
  function retrySelected() {
    var form = $("dead-form");
    var ids = Array.prototype.map.call(document.querySelectorAll(".dead-select:checked"), function (c) { return c.value; });
    if (ids.length === 0) { retryResult("Nothing selected."); return; }
    retryResult("Retrying " + ids.length + "…");
    var ok = 0;
    var failed = [];
    var next = function (i) {
      if (i === ids.length) {
        reloadDead(form.dataset.route, ok + " retried" + (failed.length ? "; failed: " + failed.join(", ") : "") + ".");
        return;
      }
      fetch("/v1/deliveries/" + encodeURIComponent(ids[i]) + "/retry", { method: "POST", headers: authHeaders() })
        .then(function (r) { if (r.status === 202) { ok++; } else { failed.push(ids[i] + " (HTTP " + r.status + ")"); } })
        .catch(function () { failed.push(ids[i]); })
        .then(function () { next(i + 1); });
    };
    next(0);
  }

  // Every dead letter of the route: POST /v1/deliveries/retry with a filter.
  function retryAll() {
    var route = $("dead-form").dataset.route;
    retryResult("Retrying every dead letter of " + route + "…");
    fetch("/v1/deliveries/retry", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json" }),
      body: JSON.stringify({ route: route, state: "dead" })
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (j) {
        if (r.status === 202) {
          reloadDead(route, (j.count || 0) + " dead letters of " + route + " queued for retry.");
        } else if (r.status === 401) {
          refused(401, j.error && j.error.message);
        } else {
          retryResult("Bulk retry failed: " + ((j.error && j.error.message) || "HTTP " + r.status));
        }
      });
    }).catch(function () { retryResult("The gateway did not answer."); });
  }

  // The overview's charts, from /console/f/stats.json.
  function drawCharts() {
    var charts = document.querySelectorAll(".chart:not(.drawn)");
    if (charts.length === 0 || typeof uPlot === "undefined") { return; }
    fetch("/console/f/stats.json", { headers: authHeaders() }).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.json();
    }).then(function (stats) {
      charts.forEach(function (el) {
        el.classList.add("drawn");
        var w = stats[el.dataset.window] || {};
        var series = w[el.dataset.series] || {};
        var names = Object.keys(series).sort();
        var data = [w.times || []];
        var opts = {
          title: el.dataset.title, width: 460, height: 220,
          series: [{}], axes: [{}, { label: el.dataset.series === "latency" ? "ms" : "count" }],
          scales: { x: { time: true, range: [w.from || 0, w.to || 1] } }
        };
        var palette = ["#2563eb", "#16a34a", "#dc2626", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
        names.forEach(function (n, i) {
          data.push(series[n]);
          opts.series.push({ label: n, stroke: palette[i % palette.length], spanGaps: false });
        });
        el.replaceChildren();
        new uPlot(opts, data, el);
      });
    }).catch(function (e) { showError("Charts: " + e.message); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("login-form").addEventListener("submit", function (evt) {
      evt.preventDefault();
      sessionStorage.setItem(KEY, $("token").value);
      $("token").value = "";
      showApp(true);
      load("/console/f/overview");
    });
    if (token()) {
      showApp(true);
      load("/console/f/overview");
    }
  });
})();
