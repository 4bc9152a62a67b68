"""A first user's journey through the Python client generated from /openapi.json: a folder, a
flow in it, a draft saved and published, a start for one user, the invocation read, the tasks
listed and a CSV uploaded. Every body is built through the generated models (`from_dict`) and
every answer parsed into them, so a schema the generator misread fails here.

WB_BASE, WB_ENV and WB_SECRET name the server, the environment and a key holding every scope.
"""

import io
import os
import sys
import time

from workbench_api_client import AuthenticatedClient, Client
from workbench_api_client.api.action_flows import (
    create_action_flow,
    publish_action_flow_draft,
    save_action_flow_draft,
)
from workbench_api_client.api.folders import create_folder
from workbench_api_client.api.triggers import (
    create_csv_task,
    csv_task_status,
    get_invocation,
    list_tasks,
    start_action_flow,
    upload_csv,
)
from workbench_api_client.models import (
    CreateFlowRequest,
    CreateFolderRequest,
    FlowConfig,
    PublishDraftRequest,
    TriggerRequestBody,
)
from workbench_api_client.types import File

CONFIG = {
    "type": "card",
    "initialSteps": ["s1"],
    "steps": {"s1": {"id": "s1", "type": "create-card", "properties": {"cardTemplateId": "t1"}}},
    "cardTemplates": {
        "t1": {
            "metadata": {"cardName": "Welcome"},
            "defaultView": {
                "content": [{"key": "h", "type": "headline", "attributes": {"text": "Hi"}}],
                "actions": [{"key": "ok", "type": "submitButton", "attributes": {"text": "OK"}}],
            },
        }
    },
}


def ok(response, status):
    """The parsed answer, after checking its status and that it parsed into a model."""
    if response.status_code != status or response.parsed is None:
        sys.exit(f"expected {status}, got {response.status_code}: {response.content!r}")
    return response.parsed


def main():
    base, env, secret = os.environ["WB_BASE"], os.environ["WB_ENV"], os.environ["WB_SECRET"]
    client = AuthenticatedClient(base_url=base, token=secret, raise_on_unexpected_status=True)

    folder = ok(create_folder.sync_detailed(
        env, client=client, body=CreateFolderRequest.from_dict({"name": "Python journey"})), 201)
    flow = ok(create_action_flow.sync_detailed(env, client=client, body=CreateFlowRequest.from_dict(
        {"name": "Welcome", "folderId": folder.data.id})), 201)
    flow_id = flow.data.id
    assert flow.data.folder_id == folder.data.id, flow

    ok(save_action_flow_draft.sync_detailed(
        env, flow_id, client=client, body=FlowConfig.from_dict(CONFIG)), 200)
    published = ok(publish_action_flow_draft.sync_detailed(
        env, flow_id, client=client, body=PublishDraftRequest.from_dict({})), 200)
    assert published.data.version == 1, published

    body = TriggerRequestBody.from_dict(
        {"flows": [{"target": {"type": "user", "targetUserIds": ["py-user"]}}]})
    started = ok(start_action_flow.sync_detailed(env, flow_id, client=client, body=body), 200)
    invocation_id = started.data.triggered_flows[0].flow_invocation_id
    for _ in range(100):
        invocation = ok(get_invocation.sync_detailed(env, flow_id, invocation_id, client=client), 200)
        if invocation.data.status != "running":
            break
        time.sleep(0.1)
    assert invocation.data.status == "completed", invocation

    created = ok(create_csv_task.sync_detailed(env, flow_id, client=client), 201)
    token = created.data.upload_url.rsplit("/", 1)[-1]
    csv = File(payload=io.BytesIO(b"target.attributes.id\ncsv-user-1\ncsv-user-2\n"),
               mime_type="text/csv")
    anonymous = Client(base_url=base, raise_on_unexpected_status=True)
    uploaded = ok(upload_csv.sync_detailed(token, client=anonymous, body=csv), 200)
    task_id = uploaded.data.task.id
    for _ in range(100):
        status = ok(csv_task_status.sync_detailed(env, flow_id, task_id, client=client), 200)
        if status.data.task.status in ("completed", "failed"):
            break
        time.sleep(0.1)
    assert status.data.task.status == "completed", status
    assert status.data.task.rows_processed == 2, status

    tasks = ok(list_tasks.sync_detailed(env, flow_id, client=client), 200)
    kinds = [type(task).__name__ for task in tasks.data]
    assert kinds == ["CsvTaskItem"], kinds
    print(f"python journey: flow {flow_id}, invocation {invocation_id}, csv task {task_id}")


if __name__ == "__main__":
    main()
