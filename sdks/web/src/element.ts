// <workbench-feed>: the user's feed of cards, kept up to date by the stream.
//
// Card content is untrusted: it is only ever set with textContent and setAttribute, never
// as HTML, and an image's src only when it is an http(s) URL.

import { cardView, WorkbenchClient, type Card, type CardElement, type FeedEvent, type StreamSubscription } from "./client";

export const FEED_ELEMENT_NAME = "workbench-feed";

const STYLE = `
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

// In an environment without a DOM (Node, a worker) the module still loads: the element is
// then only defined where `customElements` exists.
const ElementBase: typeof HTMLElement =
  typeof HTMLElement === "undefined" ? (class {} as unknown as typeof HTMLElement) : HTMLElement;

const ATTRIBUTES = ["base-url", "environment-id", "user-id", "token", "stream-id"] as const;

function text(element: CardElement, name: string): string | null {
  const value = element.attributes?.[name];
  return typeof value === "string" ? value : null;
}

function isHttpUrl(value: string): boolean {
  return /^https?:\/\//i.test(value);
}

/** The feed's order: priority 10 first, newest first within a priority. */
function compareCards(a: Card, b: Card): number {
  if (a.priority !== b.priority) return (b.priority ?? 0) - (a.priority ?? 0);
  const at = a.publishedAt ?? a.created ?? "";
  const bt = b.publishedAt ?? b.created ?? "";
  return at < bt ? 1 : at > bt ? -1 : 0;
}

/**
 * `<workbench-feed base-url environment-id user-id token [stream-id]>`, or with a `.client`
 * set by code. Events (bubbling, composed): `workbench-open` when the stream opens,
 * `workbench-error` (`detail.error`), `workbench-change` (`detail.cards`, `detail.count`),
 * `workbench-action` (`detail.card`, `detail.action`) after an action succeeded.
 */
export class WorkbenchFeedElement extends ElementBase {
  static get observedAttributes(): string[] {
    return [...ATTRIBUTES];
  }

  private explicitClient: WorkbenchClient | null = null;
  private active: WorkbenchClient | null = null;
  private subscription: StreamSubscription | null = null;
  private connected = false;
  private restartQueued = false;
  /** Bumped at each start and stop: answers of an older session are ignored. */
  private session = 0;
  private cards: Card[] = [];
  private total: number | null = null;
  private opened = false;
  private syncing = false;
  private syncAgain = false;
  /** Events received while the list is being read: applied again over it. */
  private pending: FeedEvent[] = [];
  private readonly rendered = new Map<string, { updated: string; node: HTMLElement; buttons: HTMLButtonElement[] }>();
  private readonly busy = new Set<string>();
  private root: ShadowRoot | null = null;
  private countNode: HTMLElement | null = null;
  private listNode: HTMLElement | null = null;
  private emptyNode: HTMLElement | null = null;

  /** The client in use: the one set, else the one made from the attributes. */
  get client(): WorkbenchClient | null {
    return this.explicitClient ?? this.active;
  }

  set client(client: WorkbenchClient | null) {
    this.explicitClient = client;
    this.queueRestart();
  }

  /** The cards shown, in order. */
  get feed(): readonly Card[] {
    return this.cards;
  }

  /** The open-card total shown (`null` before it is known). */
  get count(): number | null {
    return this.total;
  }

  connectedCallback(): void {
    // A `.client` set before the element was defined is an own property hiding the setter.
    if (Object.prototype.hasOwnProperty.call(this, "client")) {
      const client = (this as unknown as { client: WorkbenchClient | null }).client;
      delete (this as unknown as { client?: unknown }).client;
      this.explicitClient = client;
    }
    this.connected = true;
    this.skeleton();
    this.start();
  }

  disconnectedCallback(): void {
    this.connected = false;
    this.stop();
  }

  attributeChangedCallback(name: string, oldValue: string | null, newValue: string | null): void {
    if (oldValue === newValue) return;
    // A new token for the same user: no reconnection, the next call (and ticket) uses it.
    if (name === "token" && !this.explicitClient && this.active && newValue) {
      this.active.setToken(newValue);
      return;
    }
    this.queueRestart();
  }

  /** Reads the feed again from the service. */
  refresh(): void {
    this.resync();
  }

  private queueRestart(): void {
    if (!this.connected || this.restartQueued) return;
    this.restartQueued = true;
    queueMicrotask(() => {
      this.restartQueued = false;
      if (this.connected) this.start();
    });
  }

  private fromAttributes(): WorkbenchClient | null {
    const baseUrl = this.getAttribute("base-url");
    const environmentId = this.getAttribute("environment-id");
    const userId = this.getAttribute("user-id");
    const token = this.getAttribute("token");
    if (!baseUrl || !environmentId || !userId || !token) return null;
    return new WorkbenchClient({ baseUrl, environmentId, userId, token });
  }

  private streamId(): string | undefined {
    return this.getAttribute("stream-id") || undefined;
  }

  private start(): void {
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
        // After a reconnection the stream resumes from the last event; the list is read
        // again all the same, in case that event is too old to resume from.
        if (this.opened) this.resync();
        this.opened = true;
        this.emit("workbench-open", {});
      },
      onCard: (_card, event) => {
        if (session === this.session) this.apply(event, true);
      },
      onError: (error) => {
        if (session === this.session) this.emit("workbench-error", { error });
      },
    });
  }

  private stop(): void {
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
  private resync(): void {
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
        const seen = new Set<string>();
        this.cards = cards.filter((c) => !seen.has(c.id) && (seen.add(c.id), true));
        this.total = this.cards.length;
        const pending = this.pending;
        this.pending = [];
        this.syncing = false;
        for (const event of pending) this.apply(event, false);
        this.render();
        this.afterSync();
      },
      (error: unknown) => {
        if (session !== this.session) return;
        this.syncing = false;
        this.pending = [];
        this.emit("workbench-error", { error });
        this.afterSync();
      },
    );
  }

  private afterSync(): void {
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
  private apply(event: FeedEvent, live: boolean): void {
    if (this.syncing) {
      this.pending.push(event);
      return;
    }
    const card = event.card;
    let unknown = false;
    if (card && card.status === "active") {
      this.upsertCard(card);
    } else if (card || event.cardId) {
      this.removeCard(card?.id ?? (event.cardId as string));
    } else {
      unknown = true;
    }
    if (event.count !== null) this.total = event.count;
    if (live) {
      this.render();
      const mismatch = event.count !== null && event.count !== this.cards.length;
      if (mismatch || (unknown && event.count === null)) this.resync();
    }
  }

  private upsertCard(card: Card): void {
    const index = this.cards.findIndex((c) => c.id === card.id);
    if (index >= 0) this.cards.splice(index, 1);
    this.cards.push(card);
    this.cards.sort(compareCards);
  }

  private removeCard(cardId: string): void {
    this.cards = this.cards.filter((c) => c.id !== cardId);
  }

  private emit(type: string, detail: Record<string, unknown>): void {
    if (typeof CustomEvent === "undefined") return;
    this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true }));
  }

  private make<K extends keyof HTMLElementTagNameMap>(tag: K, part: string, className?: string): HTMLElementTagNameMap[K] {
    const node = document.createElement(tag);
    node.setAttribute("part", part);
    if (className) node.className = className;
    return node;
  }

  private skeleton(): void {
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

  private render(): void {
    if (!this.root || !this.countNode || !this.listNode || !this.emptyNode) return;
    const total = this.total ?? (this.active ? null : 0);
    this.countNode.textContent = total === null ? "" : String(total);
    const nodes: HTMLElement[] = [];
    const seen = new Set<string>();
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

  private renderCard(card: Card): { node: HTMLElement; buttons: HTMLButtonElement[] } {
    const buttons: HTMLButtonElement[] = [];
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
      const values = raw && typeof raw === "object" ? (raw as Record<string, unknown>) : {};
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

  private renderElement(element: CardElement): HTMLElement | null {
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

  private setBusy(node: HTMLElement, buttons: HTMLButtonElement[], busy: boolean): void {
    if (busy) node.setAttribute("aria-busy", "true");
    else node.removeAttribute("aria-busy");
    for (const button of buttons) button.disabled = busy;
  }

  private act(cardId: string, action: string, call: (client: WorkbenchClient) => Promise<Card>): void {
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
      (error: unknown) => {
        if (session !== this.session) return;
        this.busy.delete(cardId);
        this.render();
        this.emit("workbench-error", { error, cardId, action });
        // A card closed meanwhile (409) is no longer in the feed: read it again.
        if (error && typeof error === "object" && (error as { status?: number }).status === 409) this.resync();
      },
    );
  }
}

/** Defines `<workbench-feed>` where custom elements exist, unless the name is taken. */
export function defineWorkbenchFeed(): void {
  if (typeof customElements === "undefined" || customElements.get(FEED_ELEMENT_NAME)) return;
  customElements.define(FEED_ELEMENT_NAME, WorkbenchFeedElement);
}

defineWorkbenchFeed();

declare global {
  interface HTMLElementTagNameMap {
    "workbench-feed": WorkbenchFeedElement;
  }
}
