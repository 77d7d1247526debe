// Refreshes the page's main content every few seconds without a full
// reload: the server renders only <main> for a request marked partial.
(function () {
  var main = document.querySelector("main[data-refresh]");
  if (!main) { return; }
  var every = parseInt(main.getAttribute("data-refresh"), 10) * 1000;
  // A timer fires at once past 2^31-1 ms: never refresh in a tight loop.
  if (!(every >= 1000 && every <= 2147483647)) { return; }
  var stamp = document.getElementById("refreshed");
  function tick() {
    fetch(window.location.href, { headers: { "X-Docket-Partial": "1" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        main.innerHTML = html;
        if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
      })
      .catch(function () { if (stamp) { stamp.textContent = "refresh failed; retrying"; } })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
