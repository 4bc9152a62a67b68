import { test } from "node:test";
import assert from "node:assert/strict";

import { WorkbenchClient } from "../dist/workbench.js";
import { card, fakeEventSourceClass, fakeFetch, json, problem, recordTimers, sleep, until } from "./fakes.mjs";

const USER = "http://h/v1/env_1/users/u1";

/** A service minting tickets `wst_1/+=`, `wst_2/+=`, ...; `answer(call, n)` may override. */
function setup({ answer, ...extra } = {}) {
  let minted = 0;
  const fetch = fakeFetch((call, n) => {
    const special = answer?.(call, n);
    if (special) return special;
    assert.equal(call.method, "POST");
    assert.equal(call.url, `${USER}/cards/stream-tickets`);
    minted++;
    return json(201, { data: { ticket: `wst_${minted}/+=`, expiresAt: "2026-01-01T00:01:00.000Z" } });
  });
  const EventSource = fakeEventSourceClass();
  const client = new WorkbenchClient({
    baseUrl: "http://h",
    environmentId: "env_1",
    userId: "u1",
    token: "tok1",
    fetch,
    EventSource,
    backoffMs: 5,
    maxBackoffMs: 20,
    random: () => 0.5,
    ...extra,
  });
  return { client, fetch, EventSource, sources: EventSource.instances };
}

test("the stream mints a ticket, opens EventSource with it and delivers events", async () => {
  const { client, fetch, sources } = setup();
  const cards = [];
  const counts = [];
  const events = [];
  let opened = 0;
  const sub = client.stream({
    streamId: "s1",
    onCard: (c, event) => cards.push([c?.id ?? null, event.type]),
    onCount: (n) => counts.push(n),
    onEvent: (event) => events.push(event),
    onOpen: () => opened++,
  });
  assert.equal(sub.lastEventId, null);
  await until(() => sources.length === 1);
  assert.equal(fetch.calls[0].headers.Authorization, "Bearer tok1");
  const source = sources[0];
  assert.equal(source.url, `${USER}/cards/stream?ticket=wst_1%2F%2B%3D&streamId=s1`);
  assert.equal(source.query.get("ticket"), "wst_1/+=");
  source.open();
  assert.equal(opened, 1);
  source.emit("card-published", { card: card("ci_1"), count: 1 }, "evt_1");
  source.emit("card-dismissed", { card: null, count: 0 }, "evt_2");
  source.emit("card-published", "not json", "evt_3");
  assert.deepEqual(cards, [["ci_1", "card-published"], [null, "card-dismissed"]]);
  assert.deepEqual(counts, [1, 0]);
  assert.deepEqual(events.map((e) => [e.type, e.id, e.cardId, e.count]), [
    ["card-published", "evt_1", "ci_1", 1],
    ["card-dismissed", "evt_2", null, 0],
  ]);
  assert.equal(sub.lastEventId, "evt_3");
  sub.close();
  assert.equal(source.closed, true);
  assert.equal(sub.closed, true);
});

test("every event name of the feed reaches onCard, and a callback's throw goes to onError", async () => {
  const { client, sources } = setup();
  const seen = [];
  const errors = [];
  const sub = client.stream({
    onCard: (_c, e) => {
      seen.push(e.type);
      if (e.type === "card-expired") throw new Error("app bug");
    },
    onError: (e) => errors.push(e),
  });
  await until(() => sources.length === 1);
  const names = ["card-published", "card-snoozed", "card-unsnoozed", "card-completed", "card-dismissed", "card-cancelled", "card-expired", "card-embargoed"];
  for (const [i, name] of names.entries()) sources[0].emit(name, { card: null, count: 0 }, `evt_${i}`);
  assert.deepEqual(seen, names);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].message, "app bug");
  assert.equal(sub.lastEventId, "evt_7");
  sub.close();
});

test("on error it closes, then reopens with a new ticket and the last event id, with backoff", async () => {
  const timers = recordTimers();
  try {
    const { client, fetch, sources } = setup();
    const errors = [];
    const sub = client.stream({ onCard: () => {}, onError: (e) => errors.push(e), lastEventId: "evt_0" });
    await until(() => sources.length === 1);
    assert.equal(sources[0].query.get("lastEventId"), "evt_0");
    sources[0].open();
    sources[0].emit("card-published", { card: card("ci_1"), count: 1 }, "evt_1");
    sources[0].emit("card-completed", { card: null, count: 0 }, "evt_2");
    sources[0].fail();
    assert.equal(sources[0].closed, true, "the browser's own reconnection (same spent ticket) is stopped");
    assert.equal(errors.at(-1).code, "stream_error");
    await until(() => sources.length === 2);
    assert.equal(fetch.calls.length, 2, "a new ticket for the new connection");
    assert.equal(sources[1].query.get("ticket"), "wst_2/+=");
    assert.equal(sources[1].query.get("lastEventId"), "evt_2");
    // Failing before it opens: the delay doubles, up to the maximum.
    sources[1].fail();
    await until(() => sources.length === 3);
    sources[2].fail();
    await until(() => sources.length === 4);
    sources[3].fail();
    await until(() => sources.length === 5);
    // Once open, the next failure waits the first delay again.
    sources[4].open();
    sources[4].emit("card-published", { card: card("ci_2"), count: 1 }, "evt_3");
    sources[4].fail();
    await until(() => sources.length === 6);
    assert.equal(sources[5].query.get("lastEventId"), "evt_3");
    assert.deepEqual(timers.delays, [5, 10, 20, 20, 5]);
    assert.equal(sub.lastEventId, "evt_3");
    // Events of a closed connection are ignored.
    sources[4].emit("card-published", { card: card("ci_9"), count: 9 }, "evt_old");
    assert.equal(sub.lastEventId, "evt_3");
    sub.close();
    assert.equal(sources[5].closed, true);
    assert.equal(timers.pending.size, 0);
  } finally {
    timers.restore();
  }
});

test("jitter stays within ±20 % and under the maximum", async () => {
  const timers = recordTimers();
  try {
    let r = 0;
    const randoms = [0, 0.999, 0, 0.999];
    const { client, sources } = setup({ random: () => randoms[r++ % randoms.length], backoffMs: 10, maxBackoffMs: 1000 });
    const sub = client.stream({ onCard: () => {} });
    for (let i = 1; i <= 4; i++) {
      await until(() => sources.length === i);
      sources[i - 1].fail();
    }
    await until(() => timers.delays.length === 4);
    sub.close();
    const [a, b, c, d] = timers.delays;
    assert.equal(a, 8);
    assert.ok(b > 23.9 && b < 24, `${b}`);
    assert.equal(c, 32);
    assert.ok(d > 95.9 && d < 96, `${d}`);
    assert.equal(timers.pending.size, 0);
  } finally {
    timers.restore();
  }
});

test("minting a ticket with an expired token refreshes it", async () => {
  let refreshed = 0;
  const { client, fetch, sources } = setup({
    token: "old",
    refreshToken: async () => (refreshed++, "fresh"),
    answer: (call) => (call.headers.Authorization === "Bearer old" ? problem(401, "token_expired") : null),
  });
  const sub = client.stream({ onCard: () => {} });
  await until(() => sources.length === 1);
  assert.equal(refreshed, 1);
  assert.deepEqual(fetch.calls.map((c) => c.headers.Authorization), ["Bearer old", "Bearer fresh"]);
  assert.equal(sources[0].query.get("ticket"), "wst_1/+=");
  sub.close();
});

test("a failing mint is retried with backoff; 403 stops the stream", async () => {
  const errors = [];
  const { client, fetch, sources } = setup({
    answer: (_call, n) => (n <= 2 ? problem(503, "unavailable") : null),
  });
  const sub = client.stream({ onCard: () => {}, onError: (e) => errors.push(e) });
  await until(() => sources.length === 1);
  assert.equal(fetch.calls.length, 3);
  assert.deepEqual(errors.map((e) => e.status), [503, 503]);
  sub.close();

  const forbidden = setup({ answer: () => problem(403, "forbidden") });
  const timers = recordTimers();
  try {
    const stopped = [];
    const sub2 = forbidden.client.stream({ onCard: () => {}, onError: (e) => stopped.push(e) });
    await until(() => stopped.length === 1);
    assert.equal(stopped[0].code, "forbidden");
    assert.equal(sub2.closed, true);
    assert.equal(timers.pending.size, 0);
    assert.equal(forbidden.sources.length, 0);
  } finally {
    timers.restore();
  }
});

test("close() stops a pending reconnection and a pending mint", async () => {
  const timers = recordTimers();
  try {
    const { client, fetch, sources } = setup({ backoffMs: 30 });
    const sub = client.stream({ onCard: () => {} });
    await until(() => sources.length === 1);
    sources[0].fail();
    assert.equal(timers.pending.size, 1);
    sub.close();
    assert.equal(timers.pending.size, 0);
    await sleep(60);
    assert.equal(sources.length, 1);
    assert.equal(fetch.calls.length, 1);

    // Closed while the ticket is being minted: no EventSource is opened.
    const second = setup();
    const sub2 = second.client.stream({ onCard: () => {} });
    sub2.close();
    await until(() => second.fetch.calls.length === 1);
    await sleep(10);
    assert.equal(second.sources.length, 0);
  } finally {
    timers.restore();
  }
});
