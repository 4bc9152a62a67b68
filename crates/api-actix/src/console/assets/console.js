// The console works without this script; it only adds conveniences.
// A "Format" button beside a JSON editor re-indents what the editor holds, when it parses.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-format]");
  if (!button) return;
  var editor = document.getElementById(button.getAttribute("data-format"));
  if (!editor) return;
  try {
    editor.value = JSON.stringify(JSON.parse(editor.value), null, 2);
  } catch (e) {
    // Not JSON yet: the server says what is wrong when the form is sent.
  }
});

// Controls that need this script are hidden until it runs.
document.querySelectorAll("[data-format]").forEach(function (button) {
  button.hidden = false;
});

// A region marked data-poll (progress and what it made) is read again from its page's address
// (data-poll-url) every so many milliseconds until the page no longer asks for it, or answers
// with a refusal. It is replaced only when it changed, and not while the focus is inside it, so
// that a keyboard user keeps their place; the short status line in it is the live region.
(function poll() {
  var live = document.getElementById("live");
  if (!live || !live.dataset.poll || !live.dataset.pollUrl) return;
  var every = Math.max(500, parseInt(live.dataset.poll, 10) || 1000);
  setTimeout(function () {
    if (live.contains(document.activeElement)) { poll(); return; }
    fetch(live.dataset.pollUrl, { credentials: "same-origin" })
      .then(function (response) {
        if (response.status >= 400 && response.status < 500) return null;
        return response.ok ? response.text() : Promise.reject();
      })
      .then(function (html) {
        if (html === null) return;
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!next) return;
        if (next.innerHTML !== live.innerHTML) live.innerHTML = next.innerHTML;
        if (next.dataset.poll) {
          live.dataset.poll = next.dataset.poll;
          poll();
        } else {
          delete live.dataset.poll;
        }
      })
      .catch(function () { poll(); });
  }, every);
})();

// A CSV task's file: sent with PUT to its upload URL, its progress shown as it goes; then the
// task's page, or the service's message.
(function () {
  var form = document.getElementById("upload");
  if (!form) return;
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var input = document.getElementById("csv-file");
    var bar = document.getElementById("upload-progress");
    var result = document.getElementById("upload-result");
    if (!input.files.length) return;
    var request = new XMLHttpRequest();
    request.open("PUT", form.getAttribute("data-upload"));
    request.setRequestHeader("Content-Type", "text/csv");
    request.upload.addEventListener("progress", function (e) {
      if (e.lengthComputable) bar.value = Math.round((e.loaded / e.total) * 100);
    });
    request.addEventListener("load", function () {
      if (request.status === 200) {
        bar.value = 100;
        window.location.assign(form.getAttribute("data-then"));
        return;
      }
      var detail = "the upload was refused (" + request.status + ")";
      try { detail = JSON.parse(request.responseText).detail || detail; } catch (e) {}
      result.textContent = detail;
      result.className = "alert";
      result.setAttribute("role", "alert");
    });
    request.addEventListener("error", function () {
      result.textContent = "The upload broke off.";
      result.className = "alert";
      result.setAttribute("role", "alert");
    });
    request.send(input.files[0]);
  });
})();
