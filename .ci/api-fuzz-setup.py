"""Set-up of `make api-fuzz` (.ci/api-fuzz.sh).

With `--scopes`: print every scope a key can hold, one a line (`domain::tenancy::Scope::ALL`;
the shell script checks that the key it creates holds them all). Otherwise: create a flow, an end user, a segment and a card through the API of the
server at WB_BASE (environment WB_ENV, key WB_SECRET), and print the schemathesis
configuration that gives those ids to every operation.
"""

import base64
import hashlib
import json
import os
import sys
import urllib.request

SCOPES = [
    "workbench_folders:read", "workbench_folders:create", "workbench_folders:update",
    "workbench_folders:delete", "action_flows:read", "action_flows:trigger",
    "action_flows:write", "webhooks:read", "webhooks:write", "notification_platforms:read",
    "notification_platforms:write", "users:read", "users:write", "cards:write",
    "credentials:write", "credentials:read", "environment_settings:write", "sdk_keys:read",
    "sdk_keys:write",
]

# The one-step card flow of docs/flows.md.
CONFIG = {
    "type": "card",
    "initialSteps": ["welcome"],
    "variables": {"firstName": {"type": "string", "source": "event", "default": "there"}},
    "steps": {"welcome": {"id": "welcome", "type": "create-card",
                          "properties": {"cardTemplateId": "welcome-card"}}},
    "cardTemplates": {"welcome-card": {
        "metadata": {"cardName": "Welcome"},
        "defaultView": {
            "content": [{"key": "title", "type": "headline",
                         "attributes": {"text": "Hello %{firstName}"}}],
            "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}],
        },
    }},
}


def call(method, path, body=None):
    base, secret = os.environ["WB_BASE"], os.environ["WB_SECRET"]
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + secret)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request) as response:
        text = response.read()
        return json.loads(text) if text else None


def main():
    if sys.argv[1:] == ["--scopes"]:
        print("\n".join(SCOPES))
        return
    env = os.environ["WB_ENV"]
    v1 = "/v1/" + env
    flow = call("POST", v1 + "/action-flow", {"name": "Fuzzed flow"})["data"]["id"]
    call("POST", f"{v1}/action-flow/{flow}/config/publish", CONFIG)
    user = "fuzz-user"
    call("PUT", f"{v1}/users/{user}", {"attributes": {"country": "NZ"}, "tags": ["vip"], "testUser": True})
    segment = call("POST", v1 + "/segments", {
        "name": "NZ",
        "filter": {"match": "all", "conditions": [{"field": "attributes.country", "op": "eq", "value": "NZ"}]},
    })["data"]["id"]
    call("POST", f"{v1}/action-flow/{flow}/start", {
        "flows": [{"target": {"type": "user", "targetUserIds": [user]},
                   "payload": {"variables": {"firstName": "Ada"}}}],
    })
    # Two invocations and two CSV tasks, so that their lists hand out a cursor.
    call("POST", f"{v1}/action-flow/{flow}/start", {
        "flows": [{"target": {"type": "user", "targetUserIds": [user]},
                   "payload": {"variables": {"firstName": "Ada"}}}],
    })
    call("POST", f"{v1}/action-flow/{flow}/csv-task")
    call("POST", f"{v1}/action-flow/{flow}/csv-task")
    cursors = {
        "listInvocations": call("GET", f"{v1}/action-flow/{flow}/invocations?limit=1")["next"],
        "listTasks": call("GET", f"{v1}/action-flow/{flow}/tasks?limit=1")["next"],
    }
    # An SDK key with the document's own example, so that its reads and changes find one.
    with urllib.request.urlopen(os.environ["WB_BASE"] + "/openapi.json") as response:
        example = json.load(response)["components"]["schemas"]["SdkKeyRequest"]["example"]
    sdk_key = call("POST", v1 + "/sdk-keys", example)["data"]["id"]
    feed = call("GET", f"{v1}/users/{user}/cards")["data"]
    cards = feed["cards"] if isinstance(feed, dict) else feed
    card = cards[0]["id"]
    # A fixed id for every operation but those named with it:
    # - the one that deletes what it names: deleted by an early case, it would answer 404 to
    #   every later one, and to the stateful phase's check that what was just created exists;
    # - those whose other path parameter is an integer (a version, a CSV task id), which get
    #   neither the environment's nor the flow's: a negative case there mutates an id, the
    #   fixed value replaces the mutation, and the valid request that results is reported as
    #   invalid data accepted. They get real ids from the stateful phase's links, and unknown
    #   ones (404) otherwise.
    integer_beside = ["getActionFlowConfig", "csvTaskStatus"]
    fixed = {
        "environmentId": (env, integer_beside),
        "flowConfigId": (flow, integer_beside),
        "endUserId": (user, ["deleteEndUser"]),
        "segmentId": (segment, ["deleteSegment"]),
        "cardInstanceId": (card, []),
        "sdkKeyId": (sdk_key, ["deleteSdkKey"]),
    }
    with urllib.request.urlopen(os.environ["WB_BASE"] + "/openapi.json") as response:
        document = json.load(response)
    print_config(sys.stdout, document, fixed, cursors)
    # The stateful phase runs apart, without the segment's and the SDK key's fixed ids: a
    # list's ids lead it to delete the fixed one, and an id that overrides the links would then
    # make one it just created "not found" (docs/api.md).
    with open(os.environ["WB_STATEFUL_CONFIG"], "w") as out:
        linked = {name: v for name, v in fixed.items() if name not in ("segmentId", "sdkKeyId")}
        print_config(out, document, linked, cursors)


def print_config(out, document, fixed, cursors):
    """The schemathesis configuration: one block per operation with its fixed ids and cursor
    (when several blocks match an operation, only one block's parameters apply), then the
    exceptions."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            op = operation["operationId"]
            names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "path"]
            queries = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]
            parameters = {f"path.{name}": fixed[name][0] for name in names
                          if name in fixed and op not in fixed[name][1]}
            if "cursor" in queries:
                # A cursor is opaque: a value the service handed out (docs/api.md).
                parameters["query.cursor"] = cursors.get(op, CURSOR)
            if not parameters:
                continue
            inline = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in parameters.items())
            print(f"""
[[operations]]
include-operation-id = {json.dumps(op)}
parameters = {{ {inline} }}""", file=out)
    print_exceptions(out)


def print_exceptions(out):
    """docs/api.md, The OpenAPI document: what the document cannot express."""
    for operation, why in LEFT_OUT:
        print(f"""
# {why}
[[operations]]
include-operation-id = {json.dumps(operation)}
enabled = false""", file=out)
    for operations, check, why in EXCEPTIONS:
        print(f"""
# {why}
[[operations]]
include-operation-id = {json.dumps(operations)}
checks.{check}.enabled = false""", file=out)


def cursor_after(key):
    """A cursor after the item keyed `key`, as routes/query.rs writes it: the base64url (no
    padding) of the key and of the first 8 bytes of its check, SHA-256 of a fixed prefix and
    the key."""
    check = hashlib.sha256(b"workbench cursor\0" + key.encode()).digest()[:8]
    return base64.urlsafe_b64encode(key.encode() + check).decode().rstrip("=")


# The cursor of a page whose last item is `fuzz-user`.
CURSOR = cursor_after("fuzz-user")

# What JSON Schema cannot say, by the operations it concerns (docs/api.md lists the same).
# Operations a request-and-response fuzzer cannot call: their answer does not end.
LEFT_OUT = [
    ("streamCards", "A Server-Sent Events stream stays open until the client leaves (tests/blackbox/feed.rs)."),
]

EXCEPTIONS = [
    (["createActionFlow", "updateActionFlow", "publishActionFlowConfig", "saveActionFlowDraft"],
     "positive_data_acceptance",
     "A configuration's ids name each other (steps, next, initialSteps, cardTemplateId, %{name})."),
    (["createSegment", "updateSegment", "startActionFlow", "testActionFlow"],
     "positive_data_acceptance",
     "A filter condition's value depends on its field and op; a trigger's variables on the flow."),
    (["createPushPlatform", "updatePushPlatform"],
     "positive_data_acceptance",
     "A push credential is checked cryptographically against its platform."),
    (["createSdkKey", "updateSdkKey"],
     "positive_data_acceptance",
     "An SDK public key is read as a key (RSA of 2048 bits or more, or EC P-256); a PEM or a JWK's fields cannot say that."),
    (["subscribeWebhook", "updateWebhook"],
     "positive_data_acceptance",
     "A webhook URL must resolve to a public address, which DNS decides."),
    (["actOnCard"],
     "positive_data_acceptance",
     "A snooze must end in the future, which the clock decides."),
    (["listActionFlows"],
     "positive_data_acceptance",
     "folderId and uncategorized=true exclude each other; parameters cannot relate to each other."),
    (["listTasks"],
     "positive_data_acceptance",
     "status=pending and kind=cancel exclude each other; parameters cannot relate to each other."),
    (["listEndUsers"],
     "positive_data_acceptance",
     "segmentId must name a segment of the environment, which the data decides."),
    (["putEndUsers"],
     "positive_data_acceptance",
     "The users' ids are unique within a batch; uniqueItems compares whole items, not one field."),
    (["renameFolder"],
     "positive_data_acceptance",
     "A folder is not moved: parentId, when sent, must name its current parent."),
    (["recoverWebhook"],
     "positive_data_acceptance",
     "since is from 1970 to 9999; the date-time format has no range."),
    (["getFlowStats", "getFolderStats"],
     "positive_data_acceptance",
     "from is not after to and at most 366 days before it, and each is a real day; parameters cannot relate to each other."),
    (["publishActionFlowDraft"],
     "ensure_resource_availability",
     "A flow created without a configuration has no draft to publish (404)."),
]


if __name__ == "__main__":
    main()
