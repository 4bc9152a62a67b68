import { test } from "node:test";
import assert from "node:assert/strict";

import { WorkbenchClient, WorkbenchError, cardView, isTokenRefusal } from "../dist/workbench.js";
import { card, fakeFetch, json, problem } from "./fakes.mjs";

const BASE = "http://127.0.0.1:8080/";

function client(fetch, extra = {}) {
  return new WorkbenchClient({ baseUrl: BASE, environmentId: "env_1", userId: "u 1/x", token: "tok1", fetch, ...extra });
}

const USER = "http://127.0.0.1:8080/v1/env_1/users/u%201%2Fx";

test("listCards sends GET with the bearer token and answers the cards", async () => {
  const fetch = fakeFetch(() => json(200, { data: [card("ci_1"), card("ci_2")] }));
  const cards = await client(fetch).listCards();
  assert.deepEqual(cards.map((c) => c.id), ["ci_1", "ci_2"]);
  const [call] = fetch.calls;
  assert.equal(call.method, "GET");
  assert.equal(call.url, `${USER}/cards`);
  assert.equal(call.headers.Authorization, "Bearer tok1");
  assert.equal(call.headers.Accept, "application/json");
  assert.equal(call.headers["Content-Type"], undefined);
  assert.equal(call.body, undefined);
  assert.equal(call.credentials, "omit");
});

test("listCards and count pass streamId, URL-encoded", async () => {
  const fetch = fakeFetch((call) =>
    call.url.includes("/count") ? json(200, { data: { total: 3 } }) : json(200, { data: [] }),
  );
  const c = client(fetch);
  assert.deepEqual(await c.listCards({ streamId: "s&1" }), []);
  assert.equal(await c.count({ streamId: "s&1" }), 3);
  assert.equal(await c.count(), 3);
  assert.equal(fetch.calls[0].url, `${USER}/cards?streamId=s%261`);
  assert.equal(fetch.calls[1].url, `${USER}/cards/count?streamId=s%261`);
  assert.equal(fetch.calls[2].url, `${USER}/cards/count`);
  assert.ok(fetch.calls.every((call) => call.method === "GET"));
});

test("submit, dismiss and snooze POST the action body", async () => {
  const fetch = fakeFetch((call) => json(200, { data: card("ci/1", { status: call.body.action === "submit" ? "completed" : "dismissed" }) }));
  const c = client(fetch);
  const submitted = await c.submit("ci/1", { answer: "yes" });
  assert.equal(submitted.status, "completed");
  await c.submit("ci/1");
  await c.dismiss("ci/1");
  await c.snooze("ci/1", new Date(Date.UTC(2026, 11, 3, 10)));
  await c.snooze("ci/1", "2026-12-04T10:00:00.000Z");
  for (const call of fetch.calls) {
    assert.equal(call.method, "POST");
    assert.equal(call.url, `${USER}/cards/ci%2F1/actions`);
    assert.equal(call.headers.Authorization, "Bearer tok1");
    assert.equal(call.headers["Content-Type"], "application/json");
  }
  assert.deepEqual(
    fetch.calls.map((call) => call.body),
    [
      { action: "submit", values: { answer: "yes" } },
      { action: "submit", values: {} },
      { action: "dismiss" },
      { action: "snooze", snoozeUntil: "2026-12-03T10:00:00.000Z" },
      { action: "snooze", snoozeUntil: "2026-12-04T10:00:00.000Z" },
    ],
  );
});

test("a 401 token_expired refreshes the token once and retries once", async () => {
  const fetch = fakeFetch((call) =>
    call.headers.Authorization === "Bearer tok1" ? problem(401, "token_expired") : json(200, { data: { total: 7 } }),
  );
  let refreshed = 0;
  const c = client(fetch, { refreshToken: async () => `tok${++refreshed + 1}` });
  assert.equal(await c.count(), 7);
  assert.equal(refreshed, 1);
  assert.equal(c.token, "tok2");
  assert.deepEqual(fetch.calls.map((call) => call.headers.Authorization), ["Bearer tok1", "Bearer tok2"]);
  // The new token is kept: no refresh next time.
  assert.equal(await c.count(), 7);
  assert.equal(refreshed, 1);
  assert.equal(fetch.calls.length, 3);
});

test("concurrent refused calls share one refresh", async () => {
  const fetch = fakeFetch((call) =>
    call.headers.Authorization === "Bearer old" ? problem(401, "token_signature") : json(200, { data: [] }),
  );
  let refreshed = 0;
  const c = client(fetch, { token: "old", refreshToken: async () => (refreshed++, "new") });
  await Promise.all([c.listCards(), c.listCards(), c.listCards()]);
  assert.equal(refreshed, 1);
  assert.equal(fetch.calls.length, 6);
});

test("a refusal after the refresh is thrown, with no second refresh", async () => {
  const fetch = fakeFetch(() => problem(401, "token_expired", "the token has expired"));
  let refreshed = 0;
  const c = client(fetch, { refreshToken: async () => `t${++refreshed}` });
  await assert.rejects(c.listCards(), (error) => {
    assert.ok(error instanceof WorkbenchError);
    assert.equal(error.status, 401);
    assert.equal(error.code, "token_expired");
    assert.equal(error.detail, "the token has expired");
    return true;
  });
  assert.equal(refreshed, 1);
  assert.equal(fetch.calls.length, 2);
});

test("a 401 that is no token refusal, or no refreshToken, is thrown at once", async () => {
  const fetch = fakeFetch(() => problem(401, "unauthorized"));
  let refreshed = 0;
  await assert.rejects(client(fetch, { refreshToken: async () => (refreshed++, "x") }).count(), { status: 401, code: "unauthorized" });
  assert.equal(refreshed, 0);
  const expired = fakeFetch(() => problem(401, "token_expired"));
  await assert.rejects(client(expired).count(), { status: 401, code: "token_expired" });
  assert.equal(expired.calls.length, 1);
});

test("a failing refreshToken surfaces the refusal", async () => {
  const fetch = fakeFetch(() => problem(401, "token_expired"));
  const c = client(fetch, { refreshToken: async () => { throw new Error("backend down"); } });
  await assert.rejects(c.count(), { name: "WorkbenchError", status: 401, code: "token_expired" });
  assert.equal(fetch.calls.length, 1);
});

test("errors are WorkbenchError with status, code, detail and the problem fields", async () => {
  const fetch = fakeFetch(() =>
    problem(409, "card_not_active", "the card is completed", { errors: [{ field: "x" }] }),
  );
  const error = await client(fetch).dismiss("ci_1").catch((e) => e);
  assert.ok(error instanceof WorkbenchError);
  assert.ok(error instanceof Error);
  assert.equal(error.name, "WorkbenchError");
  assert.equal(error.status, 409);
  assert.equal(error.code, "card_not_active");
  assert.equal(error.detail, "the card is completed");
  assert.equal(error.title, "card_not_active");
  assert.deepEqual(error.errors, [{ field: "x" }]);
  assert.match(error.message, /card_not_active/);
  assert.equal(isTokenRefusal(error), false);
});

test("an error without a problem body, and a network failure, still carry a code", async () => {
  const bare = fakeFetch(() => new Response("oops", { status: 502, statusText: "Bad Gateway" }));
  await assert.rejects(client(bare).count(), { status: 502, code: "http_502" });
  const challenge = fakeFetch(() => new Response("", { status: 401, headers: { "www-authenticate": 'Bearer error="invalid_token"' } }));
  const error = await client(challenge).count().catch((e) => e);
  assert.equal(error.code, "invalid_token");
  assert.equal(isTokenRefusal(error), true);
  const down = fakeFetch(() => { throw new TypeError("Failed to fetch"); });
  await assert.rejects(client(down).count(), { status: 0, code: "network_error", detail: "Failed to fetch" });
});

test("cardView takes Web, else the first platform", () => {
  const web = card("ci_1");
  assert.equal(cardView(web).content[0].attributes.text, "Title ci_1");
  const other = { ...web, content: { iOS: { defaultView: { content: [{ key: "h", type: "headline", attributes: { text: "iOS" } }] } } } };
  assert.equal(cardView(other).content[0].attributes.text, "iOS");
  assert.equal(cardView({ ...web, content: {} }), null);
});
