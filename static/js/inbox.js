// The inbox page's live updates: an EventSource on /inbox/stream (event ids = inbox cursors;
// the browser resends Last-Event-ID on reconnect, so nothing is lost), new rows prepended,
// the unread badge refreshed through its htmx partial.
(function () {
  var status = document.getElementById("live-status");
  var list = document.getElementById("inbox-items");
  if (!status || !list || !window.EventSource) return;
  var url = status.getAttribute("data-stream") + "?since=" + encodeURIComponent(list.getAttribute("data-latest") || "0");
  var es = new EventSource(url);
  es.onopen = function () { status.textContent = "Live"; status.setAttribute("data-live", "1"); };
  es.onerror = function () { status.textContent = "Reconnecting…"; status.removeAttribute("data-live"); };
  es.addEventListener("notification", function (e) {
    var n = JSON.parse(e.data);
    if (document.getElementById("n-" + n.id)) return;
    var empty = document.getElementById("inbox-empty");
    if (empty) empty.remove();
    var li = document.createElement("li");
    li.className = "inbox-item unread new";
    li.id = "n-" + n.id;
    li.setAttribute("data-cursor", n.cursor);
    li.setAttribute("dir", "auto");
    var title = document.createElement("strong");
    title.textContent = n.title;
    var body = document.createElement("div");
    body.textContent = n.body;
    li.appendChild(title);
    li.appendChild(body);
    list.insertBefore(li, list.firstChild);
    var badge = document.getElementById("unread-badge");
    if (badge) {
      var count = parseInt(badge.getAttribute("data-unread") || "0", 10) + 1;
      badge.setAttribute("data-unread", String(count));
      badge.textContent = String(count);
    }
  });
})();
