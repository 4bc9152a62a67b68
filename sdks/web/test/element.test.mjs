// <workbench-feed> on a tiny stand-in DOM (no DOM library): enough of createElement,
// attributes, children and events to check what the element builds. A real browser test
// lives elsewhere.
import { test } from "node:test";
import assert from "node:assert/strict";

import { card, fakeEventSourceClass, fakeFetch, json, until } from "./fakes.mjs";

class FakeNode extends EventTarget {
  constructor(tag) {
    super();
    this.tagName = tag.toUpperCase();
    this.attrs = new Map();
    this.children = [];
    this.parent = null;
    this.text = "";
    this.className = "";
  }
  setAttribute(name, value) {
    this.attrs.set(name, String(value));
  }
  getAttribute(name) {
    return this.attrs.has(name) ? this.attrs.get(name) : null;
  }
  hasAttribute(name) {
    return this.attrs.has(name);
  }
  removeAttribute(name) {
    this.attrs.delete(name);
  }
  append(...nodes) {
    for (const node of nodes) {
      if (!(node instanceof FakeNode)) throw new TypeError("only nodes are appended");
      if (node.parent) node.parent.children = node.parent.children.filter((c) => c !== node);
      node.parent = this;
      this.children.push(node);
    }
  }
  replaceChildren(...nodes) {
    for (const child of this.children) child.parent = null;
    this.children = [];
    this.append(...nodes);
  }
  get textContent() {
    return this.text + this.children.map((c) => c.textContent).join("");
  }
  set textContent(value) {
    this.replaceChildren();
    this.text = String(value);
  }
  set innerHTML(_value) {
    throw new Error("innerHTML must not be used");
  }
  click() {
    if (!this.disabled) this.dispatchEvent(new Event("click"));
  }
  all(predicate, out = []) {
    for (const child of this.children) {
      if (predicate(child)) out.push(child);
      child.all(predicate, out);
    }
    return out;
  }
  parts(part) {
    return this.all((n) => (n.getAttribute("part") ?? "").split(" ").includes(part));
  }
}

class FakeHTMLElement extends FakeNode {
  constructor() {
    super("workbench-feed");
    this.shadowRoot = null;
  }
  attachShadow(init) {
    assert.equal(init.mode, "open");
    this.shadowRoot = new FakeNode("#shadow-root");
    return this.shadowRoot;
  }
}

const registry = new Map();
globalThis.HTMLElement = FakeHTMLElement;
globalThis.document = { createElement: (tag) => new FakeNode(tag) };
globalThis.customElements = {
  get: (name) => registry.get(name),
  define: (name, cls) => {
    if (registry.has(name)) throw new Error(`${name} is already defined`);
    registry.set(name, cls);
  },
};

const sdk = await import("../dist/workbench.js");

function serve(cards) {
  let minted = 0;
  const state = { cards: [...cards] };
  const fetch = fakeFetch((call) => {
    if (call.url.endsWith("/cards/stream-tickets")) return json(201, { data: { ticket: `wst_${++minted}`, expiresAt: "x" } });
    if (call.method === "GET" && call.url.split("?")[0].endsWith("/cards")) return json(200, { data: state.cards });
    const m = call.url.match(/\/cards\/([^/]+)\/actions$/);
    if (m) {
      const id = decodeURIComponent(m[1]);
      state.cards = state.cards.filter((c) => c.id !== id);
      return json(200, { data: card(id, { status: call.body.action === "dismiss" ? "dismissed" : "completed" }) });
    }
    throw new Error(`unexpected ${call.method} ${call.url}`);
  });
  const EventSource = fakeEventSourceClass();
  const client = new sdk.WorkbenchClient({ baseUrl: "http://h", environmentId: "e", userId: "u", token: "t", fetch, EventSource, backoffMs: 5 });
  return { fetch, EventSource, sources: EventSource.instances, client, state };
}

const ids = (el) => el.shadowRoot.all((n) => n.className === "card").map((n) => n.getAttribute("data-card-id"));
const countText = (el) => el.shadowRoot.parts("count")[0].textContent;

test("it is defined once as workbench-feed, and the module loads without a DOM", () => {
  assert.equal(registry.get("workbench-feed"), sdk.WorkbenchFeedElement);
  sdk.defineWorkbenchFeed(); // the name is taken: no second define, no throw
  assert.deepEqual(sdk.WorkbenchFeedElement.observedAttributes, ["base-url", "environment-id", "user-id", "token", "stream-id"]);
});

test("it renders the cards with parts, untrusted text as text, and only http(s) images", async () => {
  const hostile = card("ci_2", {
    priority: 3,
    content: {
      Android: {
        defaultView: {
          content: [
            { key: "h", type: "headline", attributes: { text: "<img src=x onerror=alert(1)>" } },
            { key: "i", type: "image", attributes: { src: "javascript:alert(1)", label: "bad" } },
            { key: "n", type: "headline", attributes: { text: 42 } },
          ],
          actions: [{ key: "go", type: "linkButton", attributes: { text: "skip me" } }],
        },
      },
    },
  });
  const { client, sources } = serve([card("ci_1", { priority: 9 }), hostile]);
  const el = new sdk.WorkbenchFeedElement();
  el.client = client;
  el.connectedCallback();
  await until(() => ids(el).length === 2);
  assert.deepEqual(ids(el), ["ci_1", "ci_2"]);
  assert.equal(countText(el), "2");
  const [first, second] = el.shadowRoot.all((n) => n.className === "card");
  assert.equal(first.tagName, "ARTICLE");
  assert.equal(first.getAttribute("part"), "card");
  const h3 = first.all((n) => n.tagName === "H3")[0];
  assert.equal(h3.textContent, "Title ci_1");
  assert.equal(h3.getAttribute("part"), "headline");
  assert.equal(first.all((n) => n.tagName === "P")[0].textContent, "Body ci_1");
  const img = first.all((n) => n.tagName === "IMG")[0];
  assert.equal(img.getAttribute("src"), "https://img.example/ci_1.png");
  assert.equal(img.getAttribute("alt"), "Alt ci_1");
  assert.equal(img.getAttribute("loading"), "lazy");
  assert.deepEqual(first.all((n) => n.tagName === "BUTTON").map((b) => [b.textContent, b.getAttribute("part")]), [["OK", "action"], ["Dismiss", "dismiss"]]);
  // Unknown element types are skipped; markup in text stays text.
  assert.equal(first.children.length, 4);
  const h = second.all((n) => n.tagName === "H3");
  assert.equal(h.length, 1);
  assert.equal(h[0].textContent, "<img src=x onerror=alert(1)>");
  assert.equal(h[0].children.length, 0);
  assert.equal(second.all((n) => n.tagName === "IMG").length, 0);
  assert.deepEqual(second.all((n) => n.tagName === "BUTTON").map((b) => b.textContent), ["Dismiss"]);
  // Every element of the shadow root has a part.
  const unparted = el.shadowRoot.all((n) => n.tagName !== "STYLE" && !n.getAttribute("part"));
  assert.deepEqual(unparted.map((n) => n.tagName), []);
  el.disconnectedCallback();
  assert.ok(sources.every((s) => s.closed));
});

test("it follows the stream, and actions call the client", async () => {
  const { client, fetch, sources, state } = serve([card("ci_1")]);
  const el = new sdk.WorkbenchFeedElement();
  let opened = 0;
  el.addEventListener("workbench-open", () => opened++);
  el.client = client;
  el.connectedCallback();
  await until(() => sources.length === 1 && ids(el).length === 1);
  sources[0].open();
  assert.equal(opened, 1);

  // Published: added in the feed's order (priority first).
  const top = card("ci_top", { priority: 10 });
  state.cards.unshift(top);
  sources[0].emit("card-published", { card: top, count: 2 }, "evt_1");
  assert.deepEqual(ids(el), ["ci_top", "ci_1"]);
  assert.equal(countText(el), "2");

  // Replaced when it changes.
  const changed = card("ci_top", { priority: 10, updated: "2026-02-01T00:00:00.000Z", content: { Web: { defaultView: { content: [{ key: "h", type: "headline", attributes: { text: "New" } }] } } } });
  sources[0].emit("card-unsnoozed", { card: changed, count: 2 }, "evt_2");
  assert.equal(el.shadowRoot.all((n) => n.getAttribute("data-card-id") === "ci_top")[0].all((n) => n.tagName === "H3")[0].textContent, "New");

  // A closed card that is sent is removed.
  sources[0].emit("card-completed", { card: { ...changed, status: "completed" }, count: 1 }, "evt_3");
  state.cards = state.cards.filter((c) => c.id !== "ci_top");
  assert.deepEqual(ids(el), ["ci_1"]);

  // card: null names no card: the count differs, so the list is read again.
  const lists = () => fetch.calls.filter((c) => c.method === "GET").length;
  const before = lists();
  state.cards = [];
  sources[0].emit("card-expired", { card: null, count: 0 }, "evt_4");
  await until(() => ids(el).length === 0);
  assert.equal(lists(), before + 1);
  assert.equal(countText(el), "0");

  // A button submits with its values; the card leaves the feed.
  const fresh = card("ci_3");
  state.cards = [fresh];
  sources[0].emit("card-published", { card: fresh, count: 1 }, "evt_5");
  const ok = el.shadowRoot.all((n) => n.tagName === "BUTTON" && n.textContent === "OK")[0];
  const acted = [];
  el.addEventListener("workbench-action", (e) => acted.push([e.detail.action, e.detail.card.id]));
  ok.click();
  await until(() => acted.length === 1);
  const post = fetch.calls.at(-1);
  assert.equal(post.url, "http://h/v1/e/users/u/cards/ci_3/actions");
  assert.deepEqual(post.body, { action: "submit", values: { answer: "yes" } });
  assert.deepEqual(ids(el), []);
  assert.equal(countText(el), "0");
  // Its event then arrives with the same count: nothing to read again.
  const after = lists();
  sources[0].emit("card-completed", { card: null, count: 0 }, "evt_6");
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(lists(), after);

  // Dismiss.
  const other = card("ci_4");
  state.cards = [other];
  sources[0].emit("card-published", { card: other, count: 1 }, "evt_7");
  el.shadowRoot.all((n) => n.tagName === "BUTTON" && n.textContent === "Dismiss")[0].click();
  await until(() => acted.length === 2);
  assert.deepEqual(fetch.calls.at(-1).body, { action: "dismiss" });
  assert.deepEqual(acted[1], ["dismiss", "ci_4"]);

  el.disconnectedCallback();
  assert.equal(sources[0].closed, true);
});

test("it builds its client from the attributes", async () => {
  const { fetch, EventSource } = serve([card("ci_1")]);
  const realFetch = globalThis.fetch;
  globalThis.fetch = fetch;
  globalThis.EventSource = EventSource;
  try {
    const el = new sdk.WorkbenchFeedElement();
    el.setAttribute("base-url", "http://h");
    el.setAttribute("environment-id", "e");
    el.setAttribute("user-id", "u");
    el.setAttribute("token", "t1");
    el.setAttribute("stream-id", "s1");
    el.connectedCallback();
    await until(() => ids(el).length === 1);
    assert.equal(fetch.calls[0].url, "http://h/v1/e/users/u/cards?streamId=s1");
    // A new token is used by the next call, without reconnecting.
    el.setAttribute("token", "t2");
    el.attributeChangedCallback("token", "t1", "t2");
    assert.equal(el.client.token, "t2");
    el.disconnectedCallback();
  } finally {
    globalThis.fetch = realFetch;
    delete globalThis.EventSource;
  }
});
