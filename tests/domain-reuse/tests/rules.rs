//! Each rule set through the public API, and services over the in-memory stores, as another
//! service would use them.

use std::sync::Arc;

use domain::chrono::Utc;
use domain::flow::machine::{decide, Command, Context};
use domain::flow::{CreateFlow, EnvironmentSettings, FlowStatus};
use domain::folder::{rules, CreateFolder};
use domain::memory::MemoryStore;
use domain::prelude::*;
use domain::serde_json::json;
use domain::trigger::idempotency::{self, Reuse, RunKey};
use domain::trigger::{fingerprint_of, Mode};

fn config() -> domain::serde_json::Value {
    json!({
        "type": "card", "version": "1", "initialSteps": ["hello"],
        "steps": {"hello": {"id": "hello", "type": "create-card", "next": [],
                            "properties": {"cardTemplateId": "hello"}}},
        "cardTemplates": {"hello": {"metadata": {"cardName": "Hello"}}}
    })
}

fn folder(id: &str, name: &str, parent: Option<&str>) -> Folder {
    Folder {
        id: id.into(),
        name: name.into(),
        environment_id: "env_1".into(),
        organisation_id: "org_1".into(),
        parent_id: parent.map(Into::into),
        created: Utc::now(),
        updated: Utc::now(),
    }
}

#[test]
fn folder_rules_apply_to_a_snapshot_of_our_own() {
    let tree = [
        folder("a", "Marketing", None),
        folder("b", "Email", Some("a")),
        folder("c", "Weekly", Some("b")),
    ];
    let create = |name: &str, parent: Option<&str>| CreateFolder {
        name: name.into(),
        parent_id: parent.map(Into::into),
    };
    assert_eq!(
        rules::check_create(&tree, &create("Push", Some("a"))).expect("fresh name"),
        Some("a".to_owned())
    );
    let taken = rules::check_create(&tree, &create("Email", Some("a")));
    assert!(
        matches!(taken, Err(DomainError::Conflict { .. })),
        "{taken:?}"
    );
    let too_deep = rules::check_create(&tree, &create("Daily", Some("c")));
    assert!(
        matches!(too_deep, Err(DomainError::Validation(_))),
        "{too_deep:?}"
    );
    assert!(rules::check_delete(&tree, "a").is_err());
}

#[test]
fn the_flow_state_machine_runs_without_a_store() {
    let now = Utc::now();
    let flow = Flow::new("flw_1", "env_1", "org_1", "Welcome", now);
    let context = Context {
        by: "editor",
        approvals_enabled: false,
        now,
    };
    let published = decide(&flow, None, &Command::Publish(config()), &context).expect("publish");
    assert_eq!(published.flow.status(), FlowStatus::Published);
    assert_eq!(published.flow.latest_version, 1);
    let archived =
        decide(&published.flow, None, &Command::SetArchived(true), &context).expect("archive");
    let refused = decide(&archived.flow, None, &Command::Publish(config()), &context);
    assert!(
        matches!(refused, Err(DomainError::Conflict { .. })),
        "{refused:?}"
    );
}

#[test]
fn triggers_are_validated_and_invocation_ids_decided_without_a_service() {
    let request = domain::trigger::parse(&json!({
        "flows": [{"target": {"type": "user", "targetUserIds": ["u2", "u1", "u1"]}, "payload": {}}]
    }))
    .expect("valid");
    assert_eq!(request.flows.len(), 1);
    let problems = domain::trigger::parse(&json!({"flows": "all"})).expect_err("invalid");
    assert!(problems.iter().any(|p| p.field == "flows"), "{problems:?}");

    let print = fingerprint_of(r#"{"targetUserIds":["u1"]}"#, "null");
    let asked = RunKey {
        flow_id: "flw_1",
        mode: Mode::Live,
        fingerprint: &print,
    };
    assert_eq!(idempotency::decide(&asked, None), Reuse::New);
    assert_eq!(idempotency::decide(&asked, Some(&asked)), Reuse::Replay);
    let other = RunKey {
        flow_id: "flw_2",
        ..asked
    };
    assert_eq!(idempotency::decide(&asked, Some(&other)), Reuse::Mismatch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_is_approved_by_another_caller_over_the_in_memory_stores() {
    let store = Arc::new(MemoryStore::new());
    let flows = Arc::new(FlowService::new(
        store.clone(),
        store.clone(),
        store,
        Arc::new(SystemClock),
    ));
    let env = EnvironmentId::from("env_1");
    let editor = Principal::trusted("editor", "org_1", &["env_1"]);
    let reviewer = Principal::trusted("reviewer", "org_1", &["env_1"]);
    let approvals = EnvironmentSettings {
        approvals_enabled: true,
    };
    flows
        .put_settings(&editor, &env, approvals)
        .await
        .expect("settings");
    let create = CreateFlow {
        name: "Welcome".into(),
        config: Some(config()),
        ..Default::default()
    };
    let flow = flows.create(&editor, &env, create).await.expect("create");

    let spawned = tokio::spawn({
        let (flows, id) = (flows.clone(), flow.id.clone());
        async move {
            let own = flows.approve_draft(&editor, &env, &id).await;
            assert!(matches!(own, Err(DomainError::Forbidden(_))), "{own:?}");
            flows.approve_draft(&reviewer, &env, &id).await?;
            flows.publish_draft(&editor, &env, &id).await
        }
    });
    let (flow, version) = spawned.await.expect("join").expect("published");
    assert_eq!(flow.status(), FlowStatus::Published);
    assert_eq!(version.approved_by.as_deref(), Some("reviewer"));
}
