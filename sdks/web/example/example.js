// The example page's script: a <workbench-feed> for the user the page's hash names.
import "./workbench.js";

const params = new URLSearchParams(location.hash.slice(1));
const status = document.getElementById("status");
const show = (state, text) => {
  status.dataset.state = state;
  status.textContent = text;
};

const base = params.get("base");
const env = params.get("env");
const user = params.get("user");
const token = params.get("token");
if (!base || !env || !user || !token) {
  show("error", "missing parameters: put #base=...&env=...&user=...&token=... in the URL");
} else {
  const feed = document.createElement("workbench-feed");
  feed.setAttribute("base-url", base);
  feed.setAttribute("environment-id", env);
  feed.setAttribute("user-id", user);
  feed.setAttribute("token", token);
  const stream = params.get("stream");
  if (stream) feed.setAttribute("stream-id", stream);
  feed.addEventListener("workbench-open", () => show("open", "open"));
  feed.addEventListener("workbench-error", (event) => {
    const error = event.detail.error;
    const text = error && error.code ? `${error.code}: ${error.detail}` : String(error);
    show("error", text);
  });
  show("connecting", "connecting");
  document.getElementById("feed").append(feed);
}
// A new hash (another user or token) starts again.
addEventListener("hashchange", () => location.reload());
