// opsboard: the little the pages need beyond htmx (served from 'self'; the CSP allows no inline script).
//
// Expanders that survive refreshes: a <details data-keep-open id="..."> remembers
// whether the user opened it (in sessionStorage), and is put back that way
// after every htmx swap (the Workers list refreshes every 5 s) and page load.
(function () {
  "use strict";
  var KEY = "opsboard.open-details";

  function load() {
    try { return new Set(JSON.parse(sessionStorage.getItem(KEY) || "[]")); } catch (e) { return new Set(); }
  }
  function save(set) {
    try { sessionStorage.setItem(KEY, JSON.stringify(Array.from(set))); } catch (e) { /* private mode */ }
  }
  var open = load();

  function restore(root) {
    (root || document).querySelectorAll("details[data-keep-open][id]").forEach(function (d) {
      var want = open.has(d.id);
      if (d.open !== want) { d.open = want; }
    });
  }

  document.addEventListener("toggle", function (event) {
    var d = event.target;
    if (!(d instanceof HTMLDetailsElement) || !d.hasAttribute("data-keep-open") || !d.id) { return; }
    if (d.open) { open.add(d.id); } else { open.delete(d.id); }
    save(open);
  }, true);

  document.addEventListener("htmx:afterSwap", function () { restore(document); });
  document.addEventListener("htmx:afterSettle", function () { restore(document); });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { restore(document); });
  } else {
    restore(document);
  }
})();
