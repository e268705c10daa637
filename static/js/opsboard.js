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

// Keyboard focus across htmx swaps.  A swap that replaces the focused element (the queue health grid
// refreshing every 3 s, a ticket re-rendered after an action, a button disabled while its request runs)
// would drop focus to <body>: the next Tab starts again at the top of the page.  The focused element is
// remembered when a request starts and found again after the swap (by id, else by what it is: tag,
// href, name, value, its place among its likes); if it is gone (the Triage button after triaging), the
// swapped content's [data-focus-fallback] gets it (the new status, the action's result).
(function () {
  "use strict";
  var remembered = null;
  var ATTRS = ["href", "name", "value", "type", "data-action", "data-limit", "data-locale-switch"];

  function describe(el) {
    if (!el || el === document.body || el === document.documentElement) { return null; }
    var selector = el.tagName.toLowerCase();
    ATTRS.forEach(function (a) {
      var v = el.getAttribute(a);
      if (v !== null) { selector += "[" + a + '="' + CSS.escape(v) + '"]'; }
    });
    // A button or field is the same one only in the same form (the same action address).
    var form = el.form ? (el.form.getAttribute("action") || "") : null;
    var likes = Array.prototype.slice.call(document.querySelectorAll(selector)).filter(function (e) {
      return (e.form ? (e.form.getAttribute("action") || "") : null) === form;
    });
    return {el: el, id: el.id || null, selector: selector, index: likes.indexOf(el), form: form};
  }

  function find(d) {
    if (d.id) { return document.getElementById(d.id); }
    var likes = Array.prototype.slice.call(document.querySelectorAll(d.selector)).filter(function (e) {
      return (e.form ? (e.form.getAttribute("action") || "") : null) === d.form;
    });
    return likes[d.index] || null;
  }

  function lost() {
    var a = document.activeElement;
    return !a || a === document.body || a === document.documentElement;
  }

  document.addEventListener("htmx:beforeRequest", function () {
    if (!lost()) { remembered = describe(document.activeElement); }
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var d = remembered;
    if (!d || !lost()) { return; }
    remembered = null;
    var el = d.el.isConnected ? d.el : find(d);
    if (el && !el.disabled && el.offsetParent !== null) {
      el.focus({preventScroll: true});
      return;
    }
    var root = event.detail && event.detail.elt && event.detail.elt.isConnected ? event.detail.elt : document;
    var fallback = root.querySelector("[data-focus-fallback]") || document.querySelector("[data-focus-fallback]");
    if (fallback) { fallback.focus({preventScroll: true}); }
  });
})();

// Drafts kept in the browser: a <textarea data-draft="key"> is saved to localStorage as the user types
// and put back after a reload or a swap that renders it empty; a form sent successfully forgets its
// drafts, and signing out (form[data-clear-drafts]) forgets them all.  Keys carry the user's id.
(function () {
  "use strict";
  var PREFIX = "opsboard.draft.";

  function get(k) { try { return localStorage.getItem(PREFIX + k); } catch (e) { return null; } }
  function put(k, v) {
    try { if (v) { localStorage.setItem(PREFIX + k, v); } else { localStorage.removeItem(PREFIX + k); } }
    catch (e) { /* storage full or disabled: the draft lives in the page only */ }
  }

  function restore(root) {
    (root || document).querySelectorAll("textarea[data-draft]").forEach(function (t) {
      var saved = get(t.getAttribute("data-draft"));
      if (!t.value && saved) { t.value = saved; }
    });
  }

  document.addEventListener("input", function (event) {
    var t = event.target;
    if (t instanceof HTMLTextAreaElement && t.hasAttribute("data-draft")) { put(t.getAttribute("data-draft"), t.value); }
  });
  // Before the answer replaces the form: a 2xx means the text was sent.  (The event fires on the swap's
  // target, which a response may have moved elsewhere: the form is the request's element.)
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = (event.detail.requestConfig && event.detail.requestConfig.elt) || event.detail.elt;
    if (!(form instanceof HTMLFormElement) || !event.detail.xhr || event.detail.xhr.status >= 400) { return; }
    form.querySelectorAll("textarea[data-draft]").forEach(function (t) { put(t.getAttribute("data-draft"), ""); });
  });
  document.addEventListener("submit", function (event) {
    if (!(event.target instanceof HTMLFormElement) || !event.target.hasAttribute("data-clear-drafts")) { return; }
    try {
      Object.keys(localStorage).forEach(function (k) { if (k.indexOf(PREFIX) === 0) { localStorage.removeItem(k); } });
    } catch (e) { /* nothing stored */ }
  });
  document.addEventListener("htmx:afterSettle", function () { restore(document); });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { restore(document); });
  } else {
    restore(document);
  }
})();

// Field errors and file checks.  A form's [data-field-error] slots are emptied when it is sent again
// (the server fills the one for the field at fault).  An <input type=file data-max-bytes data-accept-ext>
// checks each chosen file's size and name before anything is uploaded; the messages come translated in
// data-msg-size / data-msg-type ("{name}" is the file's name).
(function () {
  "use strict";
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement) {
      form.querySelectorAll("[data-field-error]").forEach(function (e) { e.textContent = ""; });
    }
  });

  document.addEventListener("change", function (event) {
    var input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "file" || !input.hasAttribute("data-max-bytes")) { return; }
    var max = parseInt(input.getAttribute("data-max-bytes"), 10);
    var exts = (input.getAttribute("data-accept-ext") || "").split(",").filter(Boolean);
    var problem = "";
    Array.prototype.forEach.call(input.files || [], function (f) {
      if (problem) { return; }
      var dot = f.name.lastIndexOf(".");
      var ext = dot >= 0 ? f.name.slice(dot).toLowerCase() : "";
      if (exts.length && exts.indexOf(ext) < 0) {
        problem = (input.getAttribute("data-msg-type") || "").replace("{name}", f.name);
      } else if (f.size > max) {
        problem = (input.getAttribute("data-msg-size") || "").replace("{name}", f.name);
      }
    });
    input.setCustomValidity(problem);
    var slot = input.id ? document.querySelector('[data-field-error="' + input.id + '"]') : null;
    if (slot) { slot.textContent = problem; }
  });
})();

// An expander the server re-renders as the user types (the template editor's diff): once the user opened
// or closed it, that choice holds over every swap of this page (<details data-user-state id=...>).
(function () {
  "use strict";
  var chosen = {};
  document.addEventListener("click", function (event) {
    var summary = event.target.closest ? event.target.closest("summary") : null;
    var d = summary ? summary.parentElement : null;
    if (d instanceof HTMLDetailsElement && d.hasAttribute("data-user-state") && d.id) { chosen[d.id] = !d.open; }
  }, true);
  document.addEventListener("htmx:afterSwap", function () {
    Object.keys(chosen).forEach(function (id) {
      var d = document.getElementById(id);
      if (d instanceof HTMLDetailsElement && d.open !== chosen[id]) { d.open = chosen[id]; }
    });
  });
})();

// Live regions refresh by morphing (htmx's morph swap with idiomorph, issue 44): the new HTML is
// compared with the page and only what changed is touched, so the focused control, the scroll
// position and the nodes themselves stay.  Two things the server cannot know are the user's: a
// <details> they opened or closed (its `open` is left alone) and the value of the field they are in.
(function () {
  "use strict";
  if (typeof Idiomorph === "undefined") { return; }
  Idiomorph.defaults.ignoreActiveValue = true;
  Idiomorph.defaults.callbacks.beforeAttributeUpdated = function (attr, node) {
    if (attr === "open" && node instanceof HTMLDetailsElement) { return false; }
    return true;
  };
})();
