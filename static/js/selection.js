// Tick boxes on job lists: the header's box ticks or clears every row shown in its form (only the
// visible rows: the list's page, never "all matching"), and the form's counter says how many are
// ticked.  Delegated from the document, so rows htmx swaps in work without setup.  Without script
// the boxes still tick one by one and the form posts them.
(function () {
  "use strict";
  function rows(form) { return form.querySelectorAll('input[type="checkbox"][name="ids"]'); }
  function update(form) {
    var boxes = rows(form), ticked = 0;
    boxes.forEach(function (b) { if (b.checked) ticked += 1; });
    var all = form.querySelector("input[data-select-all]");
    if (all) {
      all.checked = boxes.length > 0 && ticked === boxes.length;
      all.indeterminate = ticked > 0 && ticked < boxes.length;
    }
    var out = form.querySelector("[data-selected-count]");
    if (out) {
      var digits = (out.getAttribute("data-digits") || "0123456789").split("");
      out.textContent = String(ticked).replace(/[0-9]/g, function (d) { return digits[+d]; });
    }
  }
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== "checkbox") return;
    var form = box.closest("form[data-selection]");
    if (!form) return;
    if (box.hasAttribute("data-select-all")) {
      rows(form).forEach(function (b) { b.checked = box.checked; });
    }
    update(form);
  });
})();
