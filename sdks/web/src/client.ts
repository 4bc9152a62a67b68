// The Workbench end-user API, for the browser: the user's feed of cards, their count, the
// actions on a card, and the feed's changes in real time (Server-Sent Events with a ticket).
// No runtime dependency; `fetch` and `EventSource` can be injected (tests, other runtimes).

/** A card's state. `active` cards are the feed; the others are not shown. */
export type CardStatus =
  | "embargoed"
  | "active"
  | "snoozed"
  | "completed"
  | "dismissed"
  | "cancelled"
  | "expired";

/** One element of a card's view (`headline`, `text`, `image`, `submitButton`, ...). */
export interface CardElement {
  key: string;
  type: string;
  attributes?: Record<string, unknown>;
}

/** What a card shows on one platform. */
export interface CardView {
  content?: CardElement[];
  actions?: CardElement[];
}

/** A card's content on one platform (`Web`, ...). */
export interface PlatformContent {
  defaultView?: CardView;
  [key: string]: unknown;
}

/** A card instance, as the service answers it. */
export interface Card {
  id: string;
  status: CardStatus | (string & {});
  /** 10 is the top of the feed, 1 the bottom. */
  priority: number;
  streamIds: string[];
  platforms: string[];
  content: Record<string, PlatformContent | undefined>;
  cardTemplateId: string;
  cardTemplateName: string;
  flowConfigId: string;
  flowConfigVersion: number;
  flowInvocationId: string;
  flowInstanceId: string;
  publishedAt: string | null;
  expiresAt: string | null;
  snoozedUntil: string | null;
  created: string;
  updated: string;
}

/** The `event:` names the feed stream sends. */
export const FEED_EVENTS = [
  "card-published",
  "card-snoozed",
  "card-unsnoozed",
  "card-completed",
  "card-dismissed",
  "card-cancelled",
  "card-expired",
  "card-embargoed",
] as const;

export type FeedEventType = (typeof FEED_EVENTS)[number];

/** One change of the user's feed, as the stream delivered it. */
export interface FeedEvent {
  /** The `event:` name (`card-published`, ...). */
  type: FeedEventType | (string & {});
  /** The `id:` (`evt_...`), what a reconnection resumes after; `""` when none was sent. */
  id: string;
  /** The card as the feed shows it now, or `null` when it is no longer in the feed. */
  card: Card | null;
  /** The card's id: `card.id`, or the event's `cardId` when the service sends one. */
  cardId: string | null;
  /** The user's open-card total after the change, or `null` when absent. */
  count: number | null;
}

/** A stream ticket: opens the user's stream once, before `expiresAt`. */
export interface StreamTicket {
  ticket: string;
  expiresAt: string;
}

/** What the service answered instead of a success (`application/problem+json`). */
export interface ProblemInit {
  status: number;
  code: string;
  detail: string;
  title?: string | undefined;
  type?: string | undefined;
  errors?: unknown;
}

/**
 * An error of the service (its problem `status`, `code`, `detail`), or of the transport
 * (`status` 0: `network_error`, `stream_error`, `invalid_response`, `invalid_event`).
 */
export class WorkbenchError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly title: string | undefined;
  readonly type: string | undefined;
  readonly errors: unknown;

  constructor(init: ProblemInit) {
    super(`${init.code}${init.status ? ` (${init.status})` : ""}: ${init.detail}`);
    this.name = "WorkbenchError";
    this.status = init.status;
    this.code = init.code;
    this.detail = init.detail;
    this.title = init.title;
    this.type = init.type;
    this.errors = init.errors;
  }
}

/** Whether `error` is the service refusing the user token (expired, bad signature, ...). */
export function isTokenRefusal(error: unknown): boolean {
  return (
    error instanceof WorkbenchError &&
    error.status === 401 &&
    (error.code.startsWith("token_") || error.code === "invalid_token")
  );
}

/** The view of `card` to show on `platform`: that platform's, else the first one's. */
export function cardView(card: Card, platform = "Web"): CardView | null {
  const content = card.content ?? {};
  const chosen = content[platform] ?? Object.values(content).find((v) => v != null);
  const view = chosen?.defaultView;
  return view && typeof view === "object" ? view : null;
}

export interface WorkbenchClientOptions {
  /** The service's base URL, e.g. `https://cards.example.com`. */
  baseUrl: string;
  environmentId: string;
  userId: string;
  /** The user token (a JWT your backend signs for this user). */
  token: string;
  /** Gives a fresh user token when the service refuses the current one. */
  refreshToken?: (() => Promise<string>) | undefined;
  fetch?: typeof fetch | undefined;
  EventSource?: typeof EventSource | undefined;
  /** The stream's first reconnection delay (ms), doubled at each failure. Default 1000. */
  backoffMs?: number | undefined;
  /** The longest reconnection delay (ms). Default 30000. */
  maxBackoffMs?: number | undefined;
  /** A number in [0, 1) for the reconnection jitter. Default `Math.random`. */
  random?: (() => number) | undefined;
}

export interface StreamOptions {
  /** Each change of a card: the card as the feed shows it, or `null` once it left the feed. */
  onCard: (card: Card | null, event: FeedEvent) => void;
  /** The open-card total, after each change. */
  onCount?: ((count: number) => void) | undefined;
  /** Each event, before `onCard`. */
  onEvent?: ((event: FeedEvent) => void) | undefined;
  /** The stream is open (again). */
  onOpen?: (() => void) | undefined;
  /**
   * A failure: of the stream (it reconnects), of minting a ticket (it tries again, except on
   * 400, 403 and 404, where it stops), or thrown by a callback.
   */
  onError?: ((error: unknown) => void) | undefined;
  /** Only cards in this stream. */
  streamId?: string | undefined;
  /** Resume after this event id. */
  lastEventId?: string | undefined;
}

export interface StreamSubscription {
  /** Stops the stream and any reconnection for good. */
  close(): void;
  /** The id of the last event received (or the one given), `null` before any. */
  readonly lastEventId: string | null;
  /** Whether `close()` was called, or the stream stopped on a permanent error. */
  readonly closed: boolean;
}

export interface ListOptions {
  /** Only cards in this stream. */
  streamId?: string | undefined;
}

type Query = Record<string, string | null | undefined>;

const enc = encodeURIComponent;

function queryString(query: Query | undefined): string {
  if (!query) return "";
  const parts: string[] = [];
  for (const [key, value] of Object.entries(query)) {
    if (value != null && value !== "") parts.push(`${enc(key)}=${enc(value)}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

async function problemOf(res: Response): Promise<WorkbenchError> {
  let body: unknown = null;
  try {
    const text = await res.text();
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  const p = (body && typeof body === "object" ? body : {}) as Record<string, unknown>;
  const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
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
    errors: p["errors"],
  });
}

/** A client of one end user's feed in one environment. */
export class WorkbenchClient {
  readonly baseUrl: string;
  readonly environmentId: string;
  readonly userId: string;
  private currentToken: string;
  private readonly refreshFn: (() => Promise<string>) | undefined;
  private readonly fetchFn: typeof fetch | undefined;
  private readonly eventSourceClass: typeof EventSource | undefined;
  private refreshing: Promise<string> | null = null;
  /** @internal */
  readonly backoffMs: number;
  /** @internal */
  readonly maxBackoffMs: number;
  /** @internal */
  readonly random: () => number;

  constructor(options: WorkbenchClientOptions) {
    if (!options || !options.baseUrl || !options.environmentId || !options.userId) {
      throw new TypeError("WorkbenchClient needs baseUrl, environmentId and userId");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.environmentId = options.environmentId;
    this.userId = options.userId;
    this.currentToken = options.token ?? "";
    this.refreshFn = options.refreshToken;
    const g = globalThis as { fetch?: typeof fetch; EventSource?: typeof EventSource };
    // Bound: a browser's `fetch` called on another object throws "Illegal invocation".
    this.fetchFn = options.fetch ?? (g.fetch ? g.fetch.bind(globalThis) : undefined);
    this.eventSourceClass = options.EventSource ?? g.EventSource;
    this.backoffMs = options.backoffMs ?? 1000;
    this.maxBackoffMs = options.maxBackoffMs ?? 30000;
    this.random = options.random ?? Math.random;
  }

  /** The user token in use. */
  get token(): string {
    return this.currentToken;
  }

  /** Replaces the user token (the next call uses it). */
  setToken(token: string): void {
    this.currentToken = token;
  }

  /** The user's feed: the active cards, in the feed's order. */
  async listCards(options: ListOptions = {}): Promise<Card[]> {
    return this.request<Card[]>("GET", "/cards", { streamId: options.streamId });
  }

  /** How many cards the user's feed holds (the badge count). */
  async count(options: ListOptions = {}): Promise<number> {
    const data = await this.request<{ total: number }>("GET", "/cards/count", {
      streamId: options.streamId,
    });
    return data.total;
  }

  /** Submits the card, with the values of the button (or form). Answers the card. */
  async submit(cardId: string, values: Record<string, unknown> = {}): Promise<Card> {
    return this.act(cardId, { action: "submit", values });
  }

  /** Dismisses the card. Answers the card. */
  async dismiss(cardId: string): Promise<Card> {
    return this.act(cardId, { action: "dismiss" });
  }

  /** Snoozes the card until the given time. Answers the card. */
  async snooze(cardId: string, until: Date | string): Promise<Card> {
    const snoozeUntil = until instanceof Date ? until.toISOString() : until;
    return this.act(cardId, { action: "snooze", snoozeUntil });
  }

  /** Mints a stream ticket (what `stream` does before each connection). */
  async createStreamTicket(): Promise<StreamTicket> {
    return this.request<StreamTicket>("POST", "/cards/stream-tickets");
  }

  /** The URL an `EventSource` opens the stream with. */
  streamUrl(ticket: string, options: { lastEventId?: string | null | undefined; streamId?: string | undefined } = {}): string {
    return this.url("/cards/stream", {
      ticket,
      lastEventId: options.lastEventId,
      streamId: options.streamId,
    });
  }

  /**
   * Follows the feed's changes. Each connection opens with a new ticket; after an error the
   * stream closes and reconnects after 1 s, doubling up to 30 s (with jitter, back to 1 s
   * once open), resuming after the last event seen.
   */
  stream(options: StreamOptions): StreamSubscription {
    const stream = new FeedStream(this, options);
    stream.connect();
    return {
      close: () => stream.close(),
      get lastEventId() {
        return stream.lastEventId;
      },
      get closed() {
        return stream.closed;
      },
    };
  }

  /** @internal */
  openEventSource(url: string): EventSource {
    const Source = this.eventSourceClass;
    if (!Source) {
      throw new WorkbenchError({ status: 0, code: "unsupported", detail: "no EventSource in this environment" });
    }
    return new Source(url);
  }

  private act(cardId: string, body: Record<string, unknown>): Promise<Card> {
    return this.request<Card>("POST", `/cards/${enc(cardId)}/actions`, undefined, body);
  }

  private url(path: string, query?: Query): string {
    return `${this.baseUrl}/v1/${enc(this.environmentId)}/users/${enc(this.userId)}${path}${queryString(query)}`;
  }

  /** A call; on a refused token, refreshes it once (when it can) and calls once more. */
  private async request<T>(method: string, path: string, query?: Query, body?: unknown): Promise<T> {
    const url = this.url(path, query);
    const used = this.currentToken;
    try {
      return await this.send<T>(method, url, used, body);
    } catch (error) {
      if (!this.refreshFn || !isTokenRefusal(error)) throw error;
      try {
        await this.refresh(used);
      } catch {
        throw error;
      }
      return this.send<T>(method, url, this.currentToken, body);
    }
  }

  /** One refresh at a time; none when another call already replaced the refused token. */
  private refresh(refused: string): Promise<string> {
    if (this.currentToken !== refused) return Promise.resolve(this.currentToken);
    if (!this.refreshing) {
      const refreshFn = this.refreshFn as () => Promise<string>;
      this.refreshing = Promise.resolve()
        .then(refreshFn)
        .then((token) => {
          if (typeof token !== "string" || !token) throw new TypeError("refreshToken gave no token");
          this.currentToken = token;
          return token;
        })
        .finally(() => {
          this.refreshing = null;
        });
    }
    return this.refreshing;
  }

  private async send<T>(method: string, url: string, token: string, body: unknown): Promise<T> {
    const fetchFn = this.fetchFn;
    if (!fetchFn) {
      throw new WorkbenchError({ status: 0, code: "unsupported", detail: "no fetch in this environment" });
    }
    const headers: Record<string, string> = {
      Accept: "application/json",
      Authorization: `Bearer ${token}`,
    };
    const init: RequestInit = { method, headers, credentials: "omit" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res: Response;
    try {
      res = await fetchFn(url, init);
    } catch (error) {
      throw new WorkbenchError({
        status: 0,
        code: "network_error",
        detail: error instanceof Error ? error.message : String(error),
      });
    }
    if (!res.ok) throw await problemOf(res);
    let parsed: unknown;
    try {
      parsed = await res.json();
    } catch {
      throw new WorkbenchError({ status: res.status, code: "invalid_response", detail: "the answer is not JSON" });
    }
    if (!parsed || typeof parsed !== "object" || !("data" in parsed)) {
      throw new WorkbenchError({ status: res.status, code: "invalid_response", detail: "the answer has no data" });
    }
    return (parsed as { data: T }).data;
  }
}

/** Statuses on which minting a ticket will not succeed by trying again. */
const PERMANENT = new Set([400, 403, 404]);

/** One `stream()`: at most one EventSource or one pending reconnection at a time. */
class FeedStream {
  lastEventId: string | null;
  closed = false;
  private source: EventSource | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private failures = 0;
  /** Bumped at each connection: callbacks of an older one are ignored. */
  private generation = 0;

  constructor(
    private readonly client: WorkbenchClient,
    private readonly options: StreamOptions,
  ) {
    this.lastEventId = options.lastEventId || null;
  }

  connect(): void {
    if (this.closed) return;
    const generation = ++this.generation;
    const current = () => !this.closed && generation === this.generation;
    this.client.createStreamTicket().then(
      (ticket) => {
        if (!current()) return;
        this.open(ticket.ticket, current);
      },
      (error: unknown) => {
        if (!current()) return;
        this.report(error);
        if (error instanceof WorkbenchError && PERMANENT.has(error.status)) {
          this.closed = true;
          return;
        }
        this.retry();
      },
    );
  }

  close(): void {
    this.closed = true;
    this.generation++;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.drop();
  }

  private open(ticket: string, current: () => boolean): void {
    const url = this.client.streamUrl(ticket, {
      lastEventId: this.lastEventId,
      streamId: this.options.streamId,
    });
    let source: EventSource;
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
    // The browser would reconnect by itself with the same, spent, ticket: close, and
    // reconnect with a new one.
    source.onerror = () => {
      if (!current()) return;
      this.drop();
      this.generation++;
      this.report(new WorkbenchError({ status: 0, code: "stream_error", detail: "the stream failed or ended; reconnecting" }));
      this.retry();
    };
    const onMessage = (message: Event) => {
      if (!current()) return;
      this.deliver(message as MessageEvent);
    };
    for (const name of FEED_EVENTS) source.addEventListener(name, onMessage);
    source.addEventListener("message", onMessage);
  }

  private deliver(message: MessageEvent): void {
    if (message.lastEventId) this.lastEventId = message.lastEventId;
    let payload: unknown;
    try {
      payload = JSON.parse(String(message.data));
    } catch {
      this.report(new WorkbenchError({ status: 0, code: "invalid_event", detail: "an event's data is not JSON" }));
      return;
    }
    const p = (payload && typeof payload === "object" ? payload : {}) as Record<string, unknown>;
    const card = p["card"] && typeof p["card"] === "object" ? (p["card"] as Card) : null;
    const rawId = p["cardId"];
    const event: FeedEvent = {
      type: message.type,
      id: message.lastEventId || "",
      card,
      cardId: card?.id ?? (typeof rawId === "string" ? rawId : null),
      count: typeof p["count"] === "number" ? p["count"] : null,
    };
    const { onEvent, onCard, onCount } = this.options;
    if (onEvent) this.call(() => onEvent(event));
    this.call(() => onCard(card, event));
    const count = event.count;
    if (onCount && count !== null) this.call(() => onCount(count));
  }

  private retry(): void {
    if (this.closed) return;
    const { backoffMs, maxBackoffMs, random } = this.client;
    const base = Math.min(maxBackoffMs, backoffMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    // ±20 % jitter, so that many clients do not reconnect in step.
    const delay = Math.min(maxBackoffMs, Math.max(0, base * (0.8 + 0.4 * random())));
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect();
    }, delay);
  }

  private drop(): void {
    const source = this.source;
    this.source = null;
    if (source) {
      source.onopen = null;
      source.onerror = null;
      source.close();
    }
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (error) {
      this.report(error);
    }
  }

  private report(error: unknown): void {
    try {
      this.options.onError?.(error);
    } catch {
      // An error handler's own failure is not the stream's.
    }
  }
}
