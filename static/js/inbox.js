// The inbox page's live updates: an EventSource on /inbox/stream (event ids = inbox cursors;
// the browser resends Last-Event-ID on reconnect, so nothing is lost), new rows prepended,
// the unread badge counted up.  Every word and digit comes from the page (#inbox-text, a JSON
// script tag rendered through Babel in the user's language): this script holds no text of its own.
(function () {
  var status = document.getElementById("live-status");
  var list = document.getElementById("inbox-items");
  var textTag = document.getElementById("inbox-text");
  if (!status || !list || !textTag || !window.EventSource) return;
  var text = JSON.parse(textTag.textContent);
  var announce = document.getElementById("inbox-announce");

  function digits(value) {
    return String(value).replace(/[0-9]/g, function (d) { return text.digits.charAt(+d); });
  }
  function fill(pattern, name, value) { return pattern.split("{" + name + "}").join(value); }
  function utcTitle(date) {  // the exact UTC time on hover, as the server writes it
    return date.toISOString().replace("T", " ").replace("Z", " UTC");
  }
  function ago(date) {
    var seconds = Math.max(0, (Date.now() - date.getTime()) / 1000);
    var units = [["day", 86400], ["hour", 3600], ["minute", 60]];
    for (var i = 0; i < units.length; i++) {
      var n = Math.floor(seconds / units[i][1]);
      if (n >= 1) return fill(text.ago[units[i][0]][n === 1 ? "one" : "other"], "n", digits(n));
    }
    return text.just_now;
  }
  function refreshTimes() {
    var times = list.querySelectorAll("time[data-ago]");
    for (var i = 0; i < times.length; i++) times[i].textContent = ago(new Date(times[i].getAttribute("datetime")));
  }
  setInterval(refreshTimes, 30000);

  // The stream: an EventSource on /inbox/stream (which may answer a 307 to the stream server; the
  // session cookie goes along: withCredentials).  A refused stream (503 when the server holds as many
  // as it may, 401, 429) closes for good; one that keeps failing is given up for a while.  Meanwhile
  // the page polls /inbox/_since every few seconds, and tries the stream again later.
  var POLL_MS = 5000, RETRY_MS = 30000, MAX_FAILURES = 3;
  var streamUrl = status.getAttribute("data-stream");
  var pollUrl = status.getAttribute("data-poll");
  var cursor = parseInt(list.getAttribute("data-latest") || "0", 10) || 0;
  var es = null, failures = 0, pollTimer = null, retryDelay = RETRY_MS;

  function openStream() {
    es = new EventSource(streamUrl + "?since=" + encodeURIComponent(String(cursor)), {withCredentials: true});
    es.onopen = function () {
      failures = 0;
      retryDelay = RETRY_MS;
      stopPolling();
      status.textContent = text.live;
      status.setAttribute("data-live", "1");
      status.removeAttribute("data-polling");
    };
    es.onerror = function () {
      status.removeAttribute("data-live");
      failures++;
      if (es.readyState === EventSource.CLOSED || failures >= MAX_FAILURES) {
        es.close();
        es = null;
        startPolling();
        setTimeout(openStream, retryDelay);
        retryDelay = Math.min(retryDelay * 2, 300000);
      } else {
        status.textContent = text.reconnecting;
      }
    };
    es.addEventListener("notification", function (e) { add(JSON.parse(e.data)); });
  }

  function poll() {
    fetch(pollUrl + "?since=" + encodeURIComponent(String(cursor)),
          {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) data.items.forEach(add); })
      .catch(function () {});
  }
  function startPolling() {
    status.textContent = text.polling;
    status.setAttribute("data-polling", "1");
    if (pollTimer === null) { poll(); pollTimer = setInterval(poll, POLL_MS); }
  }
  function stopPolling() {
    if (pollTimer !== null) { clearInterval(pollTimer); pollTimer = null; }
  }

  function add(n) {
    if (n.cursor > cursor) cursor = n.cursor;
    if (document.getElementById("n-" + n.id)) return;
    var empty = document.getElementById("inbox-empty");
    if (empty) empty.remove();
    var li = document.createElement("li");
    li.className = "inbox-item unread new";
    li.id = "n-" + n.id;
    li.setAttribute("data-cursor", n.cursor);
    if (n.locale) li.setAttribute("lang", n.locale);   // the notification's language decides its direction
    li.setAttribute("dir", n.locale ? (text.rtl.indexOf(n.locale) >= 0 ? "rtl" : "ltr") : "auto");
    var title = document.createElement("strong");
    title.textContent = n.title;
    var when = document.createElement("time");
    var created = new Date(n.created_at);
    when.setAttribute("datetime", n.created_at);
    when.setAttribute("title", utcTitle(created));
    when.setAttribute("data-ago", "");
    when.className = "muted small nowrap";
    when.textContent = ago(created);
    var head = document.createElement("div");
    head.className = "inbox-head";
    var dot = document.createElement("span");
    dot.className = "dot";
    dot.setAttribute("aria-hidden", "true");
    var unreadWord = document.createElement("span");
    unreadWord.className = "visually-hidden";
    unreadWord.textContent = list.getAttribute("data-unread-label");
    title.className = "inbox-title";
    var whenBox = document.createElement("span");
    whenBox.className = "muted small inbox-when";
    whenBox.appendChild(when);
    head.appendChild(dot);
    head.appendChild(unreadWord);
    head.appendChild(title);
    head.appendChild(document.createTextNode(" "));
    head.appendChild(whenBox);
    var body = document.createElement("div");
    body.className = "inbox-body";
    body.textContent = n.body;
    // Mark read and Archive, as on the rendered rows (htmx posts them with the page's CSRF header).
    var actions = document.createElement("div");
    actions.className = "inbox-actions";
    actions.setAttribute("lang", list.getAttribute("data-page-lang"));
    actions.setAttribute("dir", list.getAttribute("data-page-dir"));
    [["read", "data-read-url", "data-read-label"], ["archive", "data-archive-url", "data-archive-label"]].forEach(function (a) {
      var button = document.createElement("button");
      button.className = "link";
      button.setAttribute("data-action", a[0]);
      button.setAttribute("hx-post", list.getAttribute(a[1]).replace("00000000-0000-0000-0000-000000000000", n.id));
      button.setAttribute("hx-target", "#n-" + n.id);
      button.setAttribute("hx-swap", "outerHTML");
      button.textContent = list.getAttribute(a[2]);
      actions.appendChild(button);
      actions.appendChild(document.createTextNode(" "));
    });
    // The page the notification is about (a path on this site only), as on the rendered rows.
    if (n.link && n.link.charAt(0) === "/" && n.link.charAt(1) !== "/" && n.link.indexOf("\\") < 0) {
      var open = document.createElement("a");
      open.className = "inbox-open";
      open.setAttribute("href", n.link);
      open.textContent = list.getAttribute("data-open-label");
      actions.insertBefore(document.createTextNode(" "), actions.firstChild);
      actions.insertBefore(open, actions.firstChild);
    }
    li.appendChild(head);
    li.appendChild(body);
    li.appendChild(actions);
    list.insertBefore(li, list.firstChild);
    if (window.htmx) window.htmx.process(li);
    if (announce) announce.textContent = fill(text.new_notification, "title", n.title);
    var badge = document.getElementById("unread-badge");
    if (badge) {
      var count = parseInt(badge.getAttribute("data-unread") || "0", 10) + 1;
      badge.setAttribute("data-unread", String(count));
      badge.textContent = digits(count);
      badge.setAttribute("aria-label", fill(text.unread, "n", digits(count)));
    }
  }

  openStream();
})();
