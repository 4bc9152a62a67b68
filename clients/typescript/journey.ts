// A first user's journey through the TypeScript client generated from /openapi.json
// (openapi-typescript types, openapi-fetch calls): a folder, a flow in it, a draft saved and
// published, a start for one user, the invocation read, the tasks listed and a CSV uploaded.
// It is compiled with `strict`: a body the document types wrongly does not build.
//
// WB_BASE, WB_ENV and WB_SECRET name the server, the environment and a key holding every scope.
import createClient from "openapi-fetch";
import type { components, paths } from "./generated/schema.js";

type FlowConfig = components["schemas"]["FlowConfig"];

const base = need("WB_BASE");
const environmentId = need("WB_ENV");
const client = createClient<paths>({
  baseUrl: base,
  headers: { Authorization: `Bearer ${need("WB_SECRET")}` },
});

function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

function ok<T>(what: string, answer: { data?: T; error?: unknown; response: Response }): T {
  if (answer.data === undefined) {
    throw new Error(`${what}: ${answer.response.status} ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const config: FlowConfig = {
  type: "card",
  initialSteps: ["s1"],
  steps: { s1: { id: "s1", type: "create-card", properties: { cardTemplateId: "t1" } } },
  cardTemplates: {
    t1: {
      metadata: { cardName: "Welcome" },
      defaultView: {
        content: [{ key: "h", type: "headline", attributes: { text: "Hi" } }],
        actions: [{ key: "ok", type: "submitButton", attributes: { text: "OK" } }],
      },
    },
  },
};

const env = { environmentId };
const folder = ok(
  "create a folder",
  await client.POST("/v1/{environmentId}/workbench-folder", {
    params: { path: env },
    body: { name: "TypeScript journey" },
  }),
);
const flow = ok(
  "create a flow",
  await client.POST("/v1/{environmentId}/action-flow", {
    params: { path: env },
    body: { name: "Welcome", folderId: folder.data.id },
  }),
);
const flowConfigId = flow.data.id;
const inFlow = { path: { environmentId, flowConfigId } };
ok("save a draft", await client.PUT("/v1/{environmentId}/action-flow/{flowConfigId}/config/draft", {
  params: inFlow,
  body: config,
}));
const published = ok(
  "publish the draft",
  await client.POST("/v1/{environmentId}/action-flow/{flowConfigId}/config/draft/publish", {
    params: inFlow,
    body: {},
  }),
);
if (published.data.version !== 1) throw new Error(`published version ${published.data.version}`);

const started = ok(
  "start for a user",
  await client.POST("/v1/{environmentId}/action-flow/{flowConfigId}/start", {
    params: inFlow,
    body: { flows: [{ target: { type: "user", targetUserIds: ["ts-user"] } }] },
  }),
);
const flowInvocationId = started.data.triggeredFlows[0]?.flowInvocationId ?? "";
let status = "running";
for (let i = 0; i < 100 && status === "running"; i++) {
  const invocation = ok(
    "read the invocation",
    await client.GET(
      "/v1/{environmentId}/action-flow/{flowConfigId}/invocations/{flowInvocationId}",
      { params: { path: { environmentId, flowConfigId, flowInvocationId } } },
    ),
  );
  status = invocation.data.status;
  if (status === "running") await sleep(100);
}
if (status !== "completed") throw new Error(`invocation ${flowInvocationId} is ${status}`);

const task = ok(
  "create a CSV task",
  await client.POST("/v1/{environmentId}/action-flow/{flowConfigId}/csv-task", { params: inFlow }),
);
const token = task.data.uploadUrl.split("/").pop() ?? "";
// The upload URL is the credential; the body is the file as it is, `text/csv`.
ok(
  "upload the CSV",
  await client.PUT("/uploads/csv/{token}", {
    params: { path: { token } },
    body: "target.attributes.id\ncsv-user-1\ncsv-user-2\n",
    bodySerializer: (csv) => csv,
    headers: { "content-type": "text/csv" },
  }),
);
let rows = 0;
for (let i = 0; i < 100; i++) {
  const done = ok(
    "read the CSV task",
    await client.GET("/v1/{environmentId}/action-flow/{flowConfigId}/csv-task/{taskId}/status", {
      params: { path: { environmentId, flowConfigId, taskId: task.data.task.id } },
    }),
  );
  if (done.data.task.status === "completed") {
    rows = done.data.task.rowsProcessed;
    break;
  }
  await sleep(100);
}
if (rows !== 2) throw new Error(`the CSV task processed ${rows} rows`);

const tasks = ok(
  "list the tasks",
  await client.GET("/v1/{environmentId}/action-flow/{flowConfigId}/tasks", { params: inFlow }),
);
const kinds = tasks.data.map((t) => t.kind);
if (JSON.stringify(kinds) !== '["csv"]') throw new Error(`tasks: ${JSON.stringify(kinds)}`);
console.log(`typescript journey: flow ${flowConfigId}, invocation ${flowInvocationId}`);
