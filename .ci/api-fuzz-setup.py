"""Set-up of `make api-fuzz` (.ci/api-fuzz.sh).

With `--scopes`: print every scope a key can hold, one a line (`domain::tenancy::Scope::ALL`;
the shell script checks that the key it creates holds them all). Otherwise: create a flow, an end user, a segment and a card through the API of the
server at WB_BASE (environment WB_ENV, key WB_SECRET), and print the schemathesis
configuration that gives those ids to every operation.
"""

import json
import os
import sys
import urllib.request

SCOPES = [
    "workbench_folders:read", "workbench_folders:create", "workbench_folders:update",
    "workbench_folders:delete", "action_flows:read", "action_flows:trigger",
    "action_flows:write", "webhooks:read", "webhooks:write", "notification_platforms:read",
    "notification_platforms:write", "users:read", "users:write", "cards:write",
    "credentials:write", "credentials:read", "environment_settings:write",
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
    feed = call("GET", f"{v1}/users/{user}/cards")["data"]
    cards = feed["cards"] if isinstance(feed, dict) else feed
    card = cards[0]["id"]
    # A fixed id for every operation but the one that deletes what it names: deleted by an
    # early case, it would answer 404 to every later one, and to the stateful phase's check
    # that what was just created exists.
    fixed = {
        "environmentId": (env, None),
        "flowConfigId": (flow, None),
        "endUserId": (user, "deleteEndUser"),
        "segmentId": (segment, "deleteSegment"),
        "cardInstanceId": (card, None),
    }
    print("[parameters]")
    for name, (value, deleting) in fixed.items():
        if deleting is None:
            print(f'"path.{name}" = {json.dumps(value)}')
    # A cursor is opaque: a value the service handed out (docs/api.md).
    print(f'"query.cursor" = {json.dumps(CURSOR)}')
    for name, (value, deleting) in fixed.items():
        if deleting is not None:
            print(f"""
[[operations]]
include-path-regex = "{{{name}}}"
exclude-operation-id = "{deleting}"
parameters = {{ "path.{name}" = {json.dumps(value)} }}""")
    # docs/api.md, The OpenAPI document: what the document cannot express.
    for operations, why in EXCEPTIONS:
        print(f"""
# {why}
[[operations]]
include-operation-id = {json.dumps(operations)}
checks.positive_data_acceptance.enabled = false""")


# The cursor of a page whose last item is `fuzz-user` (base64url, as routes/query.rs writes it).
CURSOR = "ZnV6ei11c2Vy"

# What JSON Schema cannot say, by the operations it concerns (docs/api.md lists the same).
EXCEPTIONS = [
    (["createActionFlow", "updateActionFlow", "publishActionFlowConfig", "saveActionFlowDraft"],
     "A configuration's ids name each other (steps, next, initialSteps, cardTemplateId, %{name})."),
    (["createSegment", "updateSegment", "startActionFlow", "testActionFlow"],
     "A filter condition's value depends on its field and op; a trigger's variables on the flow."),
    (["createPushPlatform", "updatePushPlatform"],
     "A push credential is checked cryptographically against its platform."),
    (["subscribeWebhook", "updateWebhook"],
     "A webhook URL must resolve to a public address, which DNS decides."),
    (["actOnCard"],
     "A snooze must end in the future, which the clock decides."),
]


if __name__ == "__main__":
    main()
