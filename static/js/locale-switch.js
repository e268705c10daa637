// opsboard: the header's language switch returns to the page as it was, query string included (filters,
// a search).  The server renders only the path into the form (a page's HTML does not echo its query back);
// the browser, which knows the whole address, adds the rest when the switch is pressed.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.classList || !form.classList.contains("lang-switch")) { return; }
    var next = form.querySelector("input[name=next]");
    if (next && next.value === window.location.pathname) { next.value = window.location.pathname + window.location.search; }
  }, true);
})();
