// Live status for the Clusters' pages: an enhancement, the pages are whole without it.
//
// The page names its stream in <body data-live>, the Server-Sent Events of a watch on the hub
// made as the signed-in user; each event's fields go into the cells of the Cluster it names, as
// text (textContent, never markup). Without script the page reloads every data-refresh seconds
// (<meta http-equiv="refresh"> inside <noscript>); with script and no stream, or once the stream
// cannot be kept, this reloads it on the same schedule instead.
(function () {
  "use strict";
  var body = document.body;
  var every = Number(body.getAttribute("data-refresh") || 0) * 1000;
  var url = body.getAttribute("data-live");
  var reloading = null;

  function reloadIn(ms) {
    if (reloading === null) {
      reloading = window.setTimeout(function () { window.location.reload(); }, ms);
    }
  }

  function say(text) {
    var where = document.querySelectorAll(".refreshing");
    for (var i = 0; i < where.length; i++) { where[i].textContent = text; }
  }

  // Ages (kubectl's 42s, 5m, 3h, 12d, as kokumi.core.clusterview.age says them) count on in
  // the open page, from the server's clock (data-now) rather than this machine's.
  var served = Date.parse(body.getAttribute("data-now") || "");
  var skew = isNaN(served) ? 0 : served - Date.now();
  function age(ms) {
    var seconds = Math.max(0, Math.floor(ms / 1000));
    var units = [["d", 86400], ["h", 3600], ["m", 60]];
    for (var i = 0; i < units.length; i++) {
      var size = units[i][1];
      if (seconds >= 2 * size || (units[i][0] === "m" && seconds >= size)) {
        return Math.floor(seconds / size) + units[i][0];
      }
    }
    return seconds + "s";
  }
  function tick() {
    var aged = document.querySelectorAll("[data-created]");
    for (var i = 0; i < aged.length; i++) {
      var then = Date.parse(aged[i].getAttribute("data-created") || "");
      if (!isNaN(then)) { aged[i].textContent = age(Date.now() + skew - then); }
    }
  }
  window.setInterval(tick, 1000);

  if (!url || !window.EventSource || !window.JSON) {
    if (every) { reloadIn(every); }
    return;
  }

  function set(node, selector, text) {
    var found = node.querySelectorAll(selector);
    for (var i = 0; i < found.length; i++) { found[i].textContent = text; }
  }

  function update(status) {
    var nodes = document.querySelectorAll("[data-cluster]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      if (node.getAttribute("data-cluster") !== status.key) { continue; }
      var readyNow = node.querySelector(".ready");
      if (readyNow && readyNow.textContent !== status.ready) { set(node, ".since", ""); }
      set(node, ".ready", status.ready);
      set(node, ".reason-text", status.reason);
      set(node, ".message, .status-message", status.message);
      var messages = node.querySelectorAll(".message");
      for (var m = 0; m < messages.length; m++) { messages[m].title = status.message; }
      set(node, ".server", status.server);
      set(node, ".version", status.version);
      var badges = node.querySelectorAll(".badge");
      for (var j = 0; j < badges.length; j++) {
        var badge = badges[j];
        badge.textContent = status.reason;
        badge.title = status.message;
        badge.className = "badge " + (status.ready === "True" ? "ok" : status.ready === "False" ? "bad" : "wait");
      }
    }
  }

  var source = new EventSource(url);
  var away = null;
  var opened = 0;
  function stop(ms, text) {
    source.close();
    body.setAttribute("data-live-state", "off");
    say(text);
    reloadIn(ms);
  }
  // Open once the hub's collection version is read: every change after it arrives.
  source.onopen = function () {
    if (away !== null) { window.clearTimeout(away); away = null; }
    body.setAttribute("data-live-state", "open");
    body.setAttribute("data-live-opened", String(++opened));
    say("updated live");
  };
  // Each response of the stream ends after a few seconds and the browser asks again at once,
  // resuming where it was (Last-Event-ID); a stream closed for good, or not open again within
  // the reload's interval, falls back to the reload.
  source.onerror = function () {
    if (source.readyState === EventSource.CLOSED) { fallback(); return; }
    if (away === null) { away = window.setTimeout(fallback, every || 10000); }
  };
  source.addEventListener("status", function (event) { update(JSON.parse(event.data)); });
  source.addEventListener("gone", function (event) {
    var key = JSON.parse(event.data).key;
    update({key: key, ready: "Unknown", reason: "Deleted", message: "deleted on the hub",
            server: "-", version: "-"});
  });
  function fallback() { stop(every || 10000, "refreshed every " + (every / 1000 || 10) + " s"); }
  source.addEventListener("fallback", fallback);
  source.addEventListener("reload", function () { stop(0, "reloading"); });
})();
