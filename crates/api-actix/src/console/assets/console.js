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
