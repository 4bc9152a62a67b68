// Test doubles: a scripted fetch, an EventSource driven by the test, and a clock recorder.

import { setTimeout as sleep } from "node:timers/promises";

export { sleep };

/** A fetch answering from `handler(call)`; every call is recorded. */
export function fakeFetch(handler) {
  const calls = [];
  const fn = async (url, init = {}) => {
    const call = {
      url: String(url),
      method: init.method ?? "GET",
      headers: { ...(init.headers ?? {}) },
      body: init.body === undefined ? undefined : JSON.parse(init.body),
      credentials: init.credentials,
    };
    calls.push(call);
    return handler(call, calls.length);
  };
  fn.calls = calls;
  return fn;
}

export function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

export function problem(status, code, detail = code, extra = {}) {
  const headers = { "content-type": "application/problem+json" };
  if (status === 401) headers["www-authenticate"] = 'Bearer error="invalid_token"';
  return new Response(
    JSON.stringify({ type: `https://errors.example/${code}`, title: code, status, detail, code, ...extra }),
    { status, headers },
  );
}

/** A class like EventSource whose instances the test opens, feeds and fails. */
export function fakeEventSourceClass() {
  const instances = [];
  class FakeEventSource {
    static instances = instances;
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.closed = false;
      this.onopen = null;
      this.onerror = null;
      this.listeners = new Map();
      instances.push(this);
    }
    addEventListener(type, fn) {
      if (!this.listeners.has(type)) this.listeners.set(type, []);
      this.listeners.get(type).push(fn);
    }
    close() {
      this.closed = true;
      this.readyState = 2;
    }
    get query() {
      return new URL(this.url).searchParams;
    }
    // Driven by the test:
    open() {
      this.readyState = 1;
      this.onopen?.({ type: "open" });
    }
    emit(type, data, id) {
      const message = { type, data: typeof data === "string" ? data : JSON.stringify(data), lastEventId: id ?? "" };
      for (const fn of this.listeners.get(type) ?? []) fn(message);
    }
    fail() {
      this.readyState = 0;
      this.onerror?.({ type: "error" });
    }
  }
  return FakeEventSource;
}

/** Waits until `predicate()` holds (or fails the test after `ms`). */
export async function until(predicate, ms = 2000) {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${predicate}`);
    // Not the global setTimeout, which recordTimers() may be watching.
    await sleep(1);
  }
}

/** Records the delays of setTimeout calls made while installed, and which are pending. */
export function recordTimers() {
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  const delays = [];
  const pending = new Set();
  globalThis.setTimeout = (fn, delay, ...args) => {
    delays.push(delay);
    const handle = realSet(
      (...a) => {
        pending.delete(handle);
        fn(...a);
      },
      delay,
      ...args,
    );
    pending.add(handle);
    return handle;
  };
  globalThis.clearTimeout = (handle) => {
    pending.delete(handle);
    realClear(handle);
  };
  return {
    delays,
    pending,
    restore() {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    },
  };
}

export function card(id, extra = {}) {
  return {
    id,
    status: "active",
    priority: 5,
    streamIds: [],
    platforms: ["Web"],
    content: {
      Web: {
        defaultView: {
          content: [
            { key: "h", type: "headline", attributes: { text: `Title ${id}` } },
            { key: "t", type: "text", attributes: { text: `Body ${id}` } },
            { key: "i", type: "image", attributes: { src: `https://img.example/${id}.png`, label: `Alt ${id}` } },
            { key: "x", type: "carousel", attributes: { text: "unknown" } },
          ],
          actions: [{ key: "ok", type: "submitButton", attributes: { text: "OK", values: { answer: "yes" } } }],
        },
      },
    },
    cardTemplateId: "t1",
    cardTemplateName: "Live",
    flowConfigId: "f1",
    flowConfigVersion: 1,
    flowInvocationId: "inv1",
    flowInstanceId: "fi1",
    publishedAt: "2026-01-01T10:00:00.000Z",
    expiresAt: null,
    snoozedUntil: null,
    created: "2026-01-01T10:00:00.000Z",
    updated: "2026-01-01T10:00:00.000Z",
    ...extra,
  };
}
