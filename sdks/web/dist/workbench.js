// src/client.ts
var FEED_EVENTS = [
  "card-published",
  "card-snoozed",
  "card-unsnoozed",
  "card-completed",
  "card-dismissed",
  "card-cancelled",
  "card-expired",
  "card-embargoed"
];
var WorkbenchError = class extends Error {
  constructor(init) {
    super(`${init.code}${init.status ? ` (${init.status})` : ""}: ${init.detail}`);
    this.name = "WorkbenchError";
    this.status = init.status;
    this.code = init.code;
    this.detail = init.detail;
    this.title = init.title;
    this.type = init.type;
    this.errors = init.errors;
  }
};
function isTokenRefusal(error) {
  return error instanceof WorkbenchError && error.status === 401 && (error.code.startsWith("token_") || error.code === "invalid_token");
}
function cardView(card, platform = "Web") {
  const content = card.content ?? {};
  const chosen = content[platform] ?? Object.values(content).find((v) => v != null);
  const view = chosen?.defaultView;
  return view && typeof view === "object" ? view : null;
}
var enc = encodeURIComponent;
function queryString(query) {
  if (!query) return "";
  const parts = [];
  for (const [key, value] of Object.entries(query)) {
    if (value != null && value !== "") parts.push(`${enc(key)}=${enc(value)}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}
async function problemOf(res) {
  let body = null;
  try {
    const text2 = await res.text();
    body = text2 ? JSON.parse(text2) : null;
  } catch {
    body = null;
  }
  const p = body && typeof body === "object" ? body : {};
  const str = (v) => typeof v === "string" ? v : void 0;
  let code = str(p["code"]);
  if (!code) {
    const challenge = res.headers.get("www-authenticate") ?? "";
    code = res.status === 401 && /invalid_token/.test(challenge) ? "invalid_token" : `http_${res.status}`;
  }
  return new WorkbenchError({
    status: res.status,
    code,
    detail: str(p["detail"]) ?? str(p["title"]) ?? res.statusText ?? "",
    title: str(p["title"]),
    type: str(p["type"]),
    errors: p["errors"]
  });
}
var WorkbenchClient = class {
  constructor(options) {
    this.refreshing = null;
    if (!options || !options.baseUrl || !options.environmentId || !options.userId) {
      throw new TypeError("WorkbenchClient needs baseUrl, environmentId and userId");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.environmentId = options.environmentId;
    this.userId = options.userId;
    this.currentToken = options.token ?? "";
    this.refreshFn = options.refreshToken;
    const g = globalThis;
    this.fetchFn = options.fetch ?? (g.fetch ? g.fetch.bind(globalThis) : void 0);
    this.eventSourceClass = options.EventSource ?? g.EventSource;
    this.backoffMs = options.backoffMs ?? 1e3;
    this.maxBackoffMs = options.maxBackoffMs ?? 3e4;
    this.random = options.random ?? Math.random;
  }
  /** The user token in use. */
  get token() {
    return this.currentToken;
  }
  /** Replaces the user token (the next call uses it). */
  setToken(token) {
    this.currentToken = token;
  }
  /** The user's feed: the active cards, in the feed's order. */
  async listCards(options = {}) {
    return this.request("GET", "/cards", { streamId: options.streamId });
  }
  /** How many cards the user's feed holds (the badge count). */
  async count(options = {}) {
    const data = await this.request("GET", "/cards/count", {
      streamId: options.streamId
    });
    return data.total;
  }
  /** Submits the card, with the values of the button (or form). Answers the card. */
  async submit(cardId, values = {}) {
    return this.act(cardId, { action: "submit", values });
  }
  /** Dismisses the card. Answers the card. */
  async dismiss(cardId) {
    return this.act(cardId, { action: "dismiss" });
  }
  /** Snoozes the card until the given time. Answers the card. */
  async snooze(cardId, until) {
    const snoozeUntil = until instanceof Date ? until.toISOString() : until;
    return this.act(cardId, { action: "snooze", snoozeUntil });
  }
  /** Mints a stream ticket (what `stream` does before each connection). */
  async createStreamTicket() {
    return this.request("POST", "/cards/stream-tickets");
  }
  /** The URL an `EventSource` opens the stream with. */
  streamUrl(ticket, options = {}) {
    return this.url("/cards/stream", {
      ticket,
      lastEventId: options.lastEventId,
      streamId: options.streamId
    });
  }
  /**
   * Follows the feed's changes. Each connection opens with a new ticket; after an error the
   * stream closes and reconnects after 1 s, doubling up to 30 s (with jitter, back to 1 s
   * once open), resuming after the last event seen.
   */
  stream(options) {
    const stream = new FeedStream(this, options);
    stream.connect();
    return {
      close: () => stream.close(),
      get lastEventId() {
        return stream.lastEventId;
      },
      get closed() {
        return stream.closed;
      }
    };
  }
  /** @internal */
  openEventSource(url) {
    const Source = this.eventSourceClass;
    if (!Source) {
      throw new WorkbenchError({ status: 0, code: "unsupported", detail: "no EventSource in this environment" });
    }
    return new Source(url);
  }
  act(cardId, body) {
    return this.request("POST", `/cards/${enc(cardId)}/actions`, void 0, body);
  }
  url(path, query) {
    return `${this.baseUrl}/v1/${enc(this.environmentId)}/users/${enc(this.userId)}${path}${queryString(query)}`;
  }
  /** A call; on a refused token, refreshes it once (when it can) and calls once more. */
  async request(method, path, query, body) {
    const url = this.url(path, query);
    const used = this.currentToken;
    try {
      return await this.send(method, url, used, body);
    } catch (error) {
      if (!this.refreshFn || !isTokenRefusal(error)) throw error;
      try {
        await this.refresh(used);
      } catch {
        throw error;
      }
      return this.send(method, url, this.currentToken, body);
    }
  }
  /** One refresh at a time; none when another call already replaced the refused token. */
  refresh(refused) {
    if (this.currentToken !== refused) return Promise.resolve(this.currentToken);
    if (!this.refreshing) {
      const refreshFn = this.refreshFn;
      this.refreshing = Promise.resolve().then(refreshFn).then((token) => {
        if (typeof token !== "string" || !token) throw new TypeError("refreshToken gave no token");
        this.currentToken = token;
        return token;
      }).finally(() => {
        this.refreshing = null;
      });
    }
    return this.refreshing;
  }
  async send(method, url, token, body) {
    const fetchFn = this.fetchFn;
    if (!fetchFn) {
      throw new WorkbenchError({ status: 0, code: "unsupported", detail: "no fetch in this environment" });
    }
    const headers = {
      Accept: "application/json",
      Authorization: `Bearer ${token}`
    };
    const init = { method, headers, credentials: "omit" };
    if (body !== void 0) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetchFn(url, init);
    } catch (error) {
      throw new WorkbenchError({
        status: 0,
        code: "network_error",
        detail: error instanceof Error ? error.message : String(error)
      });
    }
    if (!res.ok) throw await problemOf(res);
    let parsed;
    try {
      parsed = await res.json();
    } catch {
      throw new WorkbenchError({ status: res.status, code: "invalid_response", detail: "the answer is not JSON" });
    }
    if (!parsed || typeof parsed !== "object" || !("data" in parsed)) {
      throw new WorkbenchError({ status: res.status, code: "invalid_response", detail: "the answer has no data" });
    }
    return parsed.data;
  }
};
var PERMANENT = /* @__PURE__ */ new Set([400, 403, 404]);
var FeedStream = class {
  constructor(client, options) {
    this.client = client;
    this.options = options;
    this.closed = false;
    this.source = null;
    this.timer = null;
    this.failures = 0;
    /** Bumped at each connection: callbacks of an older one are ignored. */
    this.generation = 0;
    this.lastEventId = options.lastEventId || null;
  }
  connect() {
    if (this.closed) return;
    const generation = ++this.generation;
    const current = () => !this.closed && generation === this.generation;
    this.client.createStreamTicket().then(
      (ticket) => {
        if (!current()) return;
        this.open(ticket.ticket, current);
      },
      (error) => {
        if (!current()) return;
        this.report(error);
        if (error instanceof WorkbenchError && PERMANENT.has(error.status)) {
          this.closed = true;
          return;
        }
        this.retry();
      }
    );
  }
  close() {
    this.closed = true;
    this.generation++;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.drop();
  }
  open(ticket, current) {
    const url = this.client.streamUrl(ticket, {
      lastEventId: this.lastEventId,
      streamId: this.options.streamId
    });
    let source;
    try {
      source = this.client.openEventSource(url);
    } catch (error) {
      this.report(error);
      this.retry();
      return;
    }
    this.source = source;
    source.onopen = () => {
      if (!current()) return;
      this.failures = 0;
      this.call(() => this.options.onOpen?.());
    };
    source.onerror = () => {
      if (!current()) return;
      this.drop();
      this.generation++;
      this.report(new WorkbenchError({ status: 0, code: "stream_error", detail: "the stream failed or ended; reconnecting" }));
      this.retry();
    };
    const onMessage = (message) => {
      if (!current()) return;
      this.deliver(message);
    };
    for (const name of FEED_EVENTS) source.addEventListener(name, onMessage);
    source.addEventListener("message", onMessage);
  }
  deliver(message) {
    if (message.lastEventId) this.lastEventId = message.lastEventId;
    let payload;
    try {
      payload = JSON.parse(String(message.data));
    } catch {
      this.report(new WorkbenchError({ status: 0, code: "invalid_event", detail: "an event's data is not JSON" }));
      return;
    }
    const p = payload && typeof payload === "object" ? payload : {};
    const card = p["card"] && typeof p["card"] === "object" ? p["card"] : null;
    const rawId = p["cardId"];
    const event = {
      type: message.type,
      id: message.lastEventId || "",
      card,
      cardId: card?.id ?? (typeof rawId === "string" ? rawId : null),
      count: typeof p["count"] === "number" ? p["count"] : null
    };
    const { onEvent, onCard, onCount } = this.options;
    if (onEvent) this.call(() => onEvent(event));
    this.call(() => onCard(card, event));
    const count = event.count;
    if (onCount && count !== null) this.call(() => onCount(count));
  }
  retry() {
    if (this.closed) return;
    const { backoffMs, maxBackoffMs, random } = this.client;
    const base = Math.min(maxBackoffMs, backoffMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    const delay = Math.min(maxBackoffMs, Math.max(0, base * (0.8 + 0.4 * random())));
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay);
  }
  drop() {
    const source = this.source;
    this.source = null;
    if (source) {
      source.onopen = null;
      source.onerror = null;
      source.close();
    }
  }
  call(fn) {
    try {
      fn();
    } catch (error) {
      this.report(error);
    }
  }
  report(error) {
    try {
      this.options.onError?.(error);
    } catch {
    }
  }
};

// src/element.ts
var FEED_ELEMENT_NAME = "workbench-feed";
var STYLE = `
:host { display: block; font: inherit; color: inherit; }
:host([hidden]) { display: none; }
.header { display: flex; align-items: center; gap: 0.5em; margin: 0 0 0.5em; }
.count { min-width: 1.5em; padding: 0 0.4em; border-radius: 1em; background: #2563eb; color: #fff; text-align: center; font-size: 0.85em; }
.cards { display: grid; gap: 0.75em; }
.card { border: 1px solid rgba(127, 127, 127, 0.35); border-radius: 8px; padding: 0.75em 1em; }
.card h3 { margin: 0 0 0.25em; font-size: 1.05em; }
.card p { margin: 0 0 0.5em; }
.card img { display: block; max-width: 100%; height: auto; margin: 0 0 0.5em; border-radius: 4px; }
.actions { display: flex; flex-wrap: wrap; gap: 0.5em; }
.empty { opacity: 0.7; margin: 0; }
`;
var ElementBase = typeof HTMLElement === "undefined" ? class {
} : HTMLElement;
var ATTRIBUTES = ["base-url", "environment-id", "user-id", "token", "stream-id"];
function text(element, name) {
  const value = element.attributes?.[name];
  return typeof value === "string" ? value : null;
}
function isHttpUrl(value) {
  return /^https?:\/\//i.test(value);
}
function compareCards(a, b) {
  if (a.priority !== b.priority) return (b.priority ?? 0) - (a.priority ?? 0);
  const at = a.publishedAt ?? a.created ?? "";
  const bt = b.publishedAt ?? b.created ?? "";
  return at < bt ? 1 : at > bt ? -1 : 0;
}
var WorkbenchFeedElement = class extends ElementBase {
  constructor() {
    super(...arguments);
    this.explicitClient = null;
    this.active = null;
    this.subscription = null;
    this.connected = false;
    this.restartQueued = false;
    /** Bumped at each start and stop: answers of an older session are ignored. */
    this.session = 0;
    this.cards = [];
    this.total = null;
    this.opened = false;
    this.syncing = false;
    this.syncAgain = false;
    /** Events received while the list is being read: applied again over it. */
    this.pending = [];
    this.rendered = /* @__PURE__ */ new Map();
    this.busy = /* @__PURE__ */ new Set();
    this.root = null;
    this.countNode = null;
    this.listNode = null;
    this.emptyNode = null;
  }
  static get observedAttributes() {
    return [...ATTRIBUTES];
  }
  /** The client in use: the one set, else the one made from the attributes. */
  get client() {
    return this.explicitClient ?? this.active;
  }
  set client(client) {
    this.explicitClient = client;
    this.queueRestart();
  }
  /** The cards shown, in order. */
  get feed() {
    return this.cards;
  }
  /** The open-card total shown (`null` before it is known). */
  get count() {
    return this.total;
  }
  connectedCallback() {
    if (Object.prototype.hasOwnProperty.call(this, "client")) {
      const client = this.client;
      delete this.client;
      this.explicitClient = client;
    }
    this.connected = true;
    this.skeleton();
    this.start();
  }
  disconnectedCallback() {
    this.connected = false;
    this.stop();
  }
  attributeChangedCallback(name, oldValue, newValue) {
    if (oldValue === newValue) return;
    if (name === "token" && !this.explicitClient && this.active && newValue) {
      this.active.setToken(newValue);
      return;
    }
    this.queueRestart();
  }
  /** Reads the feed again from the service. */
  refresh() {
    this.resync();
  }
  queueRestart() {
    if (!this.connected || this.restartQueued) return;
    this.restartQueued = true;
    queueMicrotask(() => {
      this.restartQueued = false;
      if (this.connected) this.start();
    });
  }
  fromAttributes() {
    const baseUrl = this.getAttribute("base-url");
    const environmentId = this.getAttribute("environment-id");
    const userId = this.getAttribute("user-id");
    const token = this.getAttribute("token");
    if (!baseUrl || !environmentId || !userId || !token) return null;
    return new WorkbenchClient({ baseUrl, environmentId, userId, token });
  }
  streamId() {
    return this.getAttribute("stream-id") || void 0;
  }
  start() {
    this.stop();
    const client = this.explicitClient ?? this.fromAttributes();
    this.cards = [];
    this.total = null;
    this.active = client;
    this.render();
    if (!client) return;
    const session = this.session;
    this.resync();
    this.subscription = client.stream({
      streamId: this.streamId(),
      onOpen: () => {
        if (session !== this.session) return;
        if (this.opened) this.resync();
        this.opened = true;
        this.emit("workbench-open", {});
      },
      onCard: (_card, event) => {
        if (session === this.session) this.apply(event, true);
      },
      onError: (error) => {
        if (session === this.session) this.emit("workbench-error", { error });
      }
    });
  }
  stop() {
    this.session++;
    this.subscription?.close();
    this.subscription = null;
    this.active = null;
    this.opened = false;
    this.syncing = false;
    this.syncAgain = false;
    this.pending = [];
    this.busy.clear();
  }
  /** Reads the list; events that arrive meanwhile are applied over it. */
  resync() {
    const client = this.active;
    if (!client) return;
    if (this.syncing) {
      this.syncAgain = true;
      return;
    }
    this.syncing = true;
    this.pending = [];
    const session = this.session;
    client.listCards({ streamId: this.streamId() }).then(
      (cards) => {
        if (session !== this.session) return;
        const seen = /* @__PURE__ */ new Set();
        this.cards = cards.filter((c) => !seen.has(c.id) && (seen.add(c.id), true));
        this.total = this.cards.length;
        const pending = this.pending;
        this.pending = [];
        this.syncing = false;
        for (const event of pending) this.apply(event, false);
        this.render();
        this.afterSync();
      },
      (error) => {
        if (session !== this.session) return;
        this.syncing = false;
        this.pending = [];
        this.emit("workbench-error", { error });
        this.afterSync();
      }
    );
  }
  afterSync() {
    if (this.syncAgain) {
      this.syncAgain = false;
      this.resync();
    }
  }
  /**
   * One change: a card in the feed is added or replaced; one that left it is removed. An
   * event that names no card (the card is null and no id is sent) is reconciled by the
   * count: when it differs from the cards shown, the list is read again.
   */
  apply(event, live) {
    if (this.syncing) {
      this.pending.push(event);
      return;
    }
    const card = event.card;
    let unknown = false;
    if (card && card.status === "active") {
      this.upsertCard(card);
    } else if (card || event.cardId) {
      this.removeCard(card?.id ?? event.cardId);
    } else {
      unknown = true;
    }
    if (event.count !== null) this.total = event.count;
    if (live) {
      this.render();
      const mismatch = event.count !== null && event.count !== this.cards.length;
      if (mismatch || unknown && event.count === null) this.resync();
    }
  }
  upsertCard(card) {
    const index = this.cards.findIndex((c) => c.id === card.id);
    if (index >= 0) this.cards.splice(index, 1);
    this.cards.push(card);
    this.cards.sort(compareCards);
  }
  removeCard(cardId) {
    this.cards = this.cards.filter((c) => c.id !== cardId);
  }
  emit(type, detail) {
    if (typeof CustomEvent === "undefined") return;
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }
  make(tag, part, className) {
    const node = document.createElement(tag);
    node.setAttribute("part", part);
    if (className) node.className = className;
    return node;
  }
  skeleton() {
    if (this.root) return;
    const root = this.shadowRoot ?? this.attachShadow({ mode: "open" });
    this.root = root;
    const style = document.createElement("style");
    style.textContent = STYLE;
    const header = this.make("div", "header", "header");
    const title = this.make("span", "title", "title");
    title.textContent = "Cards";
    const count = this.make("span", "count", "count");
    count.setAttribute("aria-live", "polite");
    header.append(title, count);
    const list = this.make("div", "cards", "cards");
    list.setAttribute("role", "list");
    const empty = this.make("p", "empty", "empty");
    empty.textContent = "No cards";
    root.replaceChildren(style, header, list, empty);
    this.countNode = count;
    this.listNode = list;
    this.emptyNode = empty;
  }
  render() {
    if (!this.root || !this.countNode || !this.listNode || !this.emptyNode) return;
    const total = this.total ?? (this.active ? null : 0);
    this.countNode.textContent = total === null ? "" : String(total);
    const nodes = [];
    const seen = /* @__PURE__ */ new Set();
    for (const card of this.cards) {
      seen.add(card.id);
      let entry = this.rendered.get(card.id);
      if (!entry || entry.updated !== card.updated) {
        entry = { updated: card.updated, ...this.renderCard(card) };
        this.rendered.set(card.id, entry);
      }
      this.setBusy(entry.node, entry.buttons, this.busy.has(card.id));
      nodes.push(entry.node);
    }
    for (const id of [...this.rendered.keys()]) if (!seen.has(id)) this.rendered.delete(id);
    this.listNode.replaceChildren(...nodes);
    if (this.cards.length) this.emptyNode.setAttribute("hidden", "");
    else this.emptyNode.removeAttribute("hidden");
    this.emit("workbench-change", { cards: [...this.cards], count: this.total });
  }
  renderCard(card) {
    const buttons = [];
    const node = this.make("article", "card", "card");
    node.setAttribute("data-card-id", card.id);
    node.setAttribute("role", "listitem");
    const view = cardView(card);
    for (const element of view?.content ?? []) {
      const child = this.renderElement(element);
      if (child) node.append(child);
    }
    const actions = this.make("div", "actions", "actions");
    for (const action of view?.actions ?? []) {
      if (action.type !== "submitButton") continue;
      const button = this.make("button", "action", "action");
      button.type = "button";
      button.setAttribute("data-action-key", String(action.key ?? ""));
      button.textContent = text(action, "text") ?? String(action.key ?? "OK");
      const raw = action.attributes?.["values"];
      const values = raw && typeof raw === "object" ? raw : {};
      button.addEventListener("click", () => this.act(card.id, "submit", (c) => c.submit(card.id, values)));
      actions.append(button);
      buttons.push(button);
    }
    const dismiss = this.make("button", "dismiss", "dismiss");
    dismiss.type = "button";
    dismiss.textContent = "Dismiss";
    dismiss.addEventListener("click", () => this.act(card.id, "dismiss", (c) => c.dismiss(card.id)));
    actions.append(dismiss);
    buttons.push(dismiss);
    node.append(actions);
    return { node, buttons };
  }
  renderElement(element) {
    switch (element.type) {
      case "headline": {
        const value = text(element, "text");
        if (value === null) return null;
        const h3 = this.make("h3", "headline", "headline");
        h3.textContent = value;
        return h3;
      }
      case "text": {
        const value = text(element, "text");
        if (value === null) return null;
        const p = this.make("p", "text", "text");
        p.textContent = value;
        return p;
      }
      case "image": {
        const src = text(element, "src");
        if (src === null || !isHttpUrl(src)) return null;
        const img = this.make("img", "image", "image");
        img.setAttribute("alt", text(element, "label") ?? "");
        img.setAttribute("loading", "lazy");
        img.setAttribute("src", src);
        return img;
      }
      default:
        return null;
    }
  }
  setBusy(node, buttons, busy) {
    if (busy) node.setAttribute("aria-busy", "true");
    else node.removeAttribute("aria-busy");
    for (const button of buttons) button.disabled = busy;
  }
  act(cardId, action, call) {
    const client = this.active;
    if (!client || this.busy.has(cardId)) return;
    const session = this.session;
    this.busy.add(cardId);
    this.render();
    call(client).then(
      (card) => {
        if (session !== this.session) return;
        this.busy.delete(cardId);
        if (card.status === "active") this.upsertCard(card);
        else this.removeCard(card.id);
        this.total = this.cards.length;
        this.render();
        this.emit("workbench-action", { card, action });
      },
      (error) => {
        if (session !== this.session) return;
        this.busy.delete(cardId);
        this.render();
        this.emit("workbench-error", { error, cardId, action });
        if (error && typeof error === "object" && error.status === 409) this.resync();
      }
    );
  }
};
function defineWorkbenchFeed() {
  if (typeof customElements === "undefined" || customElements.get(FEED_ELEMENT_NAME)) return;
  customElements.define(FEED_ELEMENT_NAME, WorkbenchFeedElement);
}
defineWorkbenchFeed();
export {
  FEED_ELEMENT_NAME,
  FEED_EVENTS,
  WorkbenchClient,
  WorkbenchError,
  WorkbenchFeedElement,
  cardView,
  defineWorkbenchFeed,
  isTokenRefusal
};
