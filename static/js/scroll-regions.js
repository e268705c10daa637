// opsboard: a table wider than the screen scrolls inside its .table-wrap; keyboard users reach that scroll
// only when the region takes focus (axe: scrollable-region-focusable).  Only wraps that really overflow
// get a tab stop, checked after load, after every htmx swap and when the window is resized.
(function () {
  "use strict";
  function mark() {
    document.querySelectorAll(".table-wrap, .scroll-x").forEach(function (el) {
      var scrolls = el.scrollWidth > el.clientWidth + 1;
      if (scrolls && !el.hasAttribute("tabindex")) { el.setAttribute("tabindex", "0"); el.setAttribute("data-scroll-stop", ""); }
      if (!scrolls && el.hasAttribute("data-scroll-stop")) { el.removeAttribute("tabindex"); el.removeAttribute("data-scroll-stop"); }
    });
  }
  document.addEventListener("htmx:afterSettle", mark);
  window.addEventListener("resize", mark);
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", mark); } else { mark(); }
})();
