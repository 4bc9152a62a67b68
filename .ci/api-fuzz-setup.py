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
    params = {
        "environmentId": env,
        "flowConfigId": flow,
        "endUserId": user,
        "segmentId": segment,
        "cardInstanceId": card,
    }
    print("[parameters]")
    for name, value in params.items():
        print(f'"path.{name}" = {json.dumps(value)}')
    # docs/api.md, The OpenAPI document: what the document cannot express.
    print(CONFIG_OPERATIONS)


# A configuration is valid only when its ids name each other (steps, `next`, `initialSteps`,
# `cardTemplateId`, `%{name}`): JSON Schema cannot relate one value to another, so generated
# configurations the schema allows are refused.
CONFIG_OPERATIONS = """
[[operations]]
include-operation-id-regex = "^(createActionFlow|updateActionFlow|publishActionFlowConfig|saveActionFlowDraft)$"
checks.positive_data_acceptance.enabled = false
"""


if __name__ == "__main__":
    main()
