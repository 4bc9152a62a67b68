//! Pruning on both backends (contract §14): what is past its retention goes, in batches;
//! open cards and pending work stay; a dry run removes nothing.

use std::sync::Arc;

use adapters_diesel::testing::{instant, raw_execute, raw_texts};
use adapters_diesel::{both_backends, Database, DieselPruneRepository};
use domain::retention::{PruneKind, PruneRepository, Pruner, Retention, RetentionPolicy};
use domain::SystemClock;

/// Long past any retention.
const OLD: &str = "2020-01-01 00:00:00";
/// An id of each kind minted long ago (its time part is the earliest there is), and one
/// minted far ahead.
fn old(prefix: &str, name: &str) -> String {
    format!("{prefix}_0000000000{name}")
}
fn fresh(prefix: &str, name: &str) -> String {
    format!("{prefix}_zzzzzzzzzz{name}")
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

fn seed(url: &str) {
    let now = now();
    // An instant of the tables whose instants are milliseconds on SQLite.
    let at = |text: &str| instant(url, text);
    for sql in [
        format!(
            "INSERT INTO organisations (id, name, created) VALUES ('org_1', 'default', \
            '{OLD}')"
        ),
        format!(
            "INSERT INTO environments (id, organisation_id, name, created) VALUES ('env_a', \
            'org_1', 'a', '{OLD}')"
        ),
        format!(
            "INSERT INTO action_flows (id, environment_id, organisation_id, name, name_folded, \
            description, folder_id, archived, latest_version, published_version, draft_version, \
                variables, revision, created, updated) VALUES ('flw_1', 'env_a', 'org_1', 'F', \
                    'f', '', NULL, FALSE, 1, 1, NULL, '[]', 1, '{OLD}', '{OLD}')"
        ),
        format!(
            "INSERT INTO webhook_subscriptions (id, environment_id, url, method, headers, \
            types, secret, enabled, created, updated) VALUES ('whk_1', 'env_a', \
                'https://example.com', 'POST', '{{}}', '[]', 'sealed', TRUE, '{OLD}', '{OLD}')"
        ),
        format!(
            "INSERT INTO api_keys (id, organisation_id, name, secret_hash, roles, scopes, \
            all_environments, created) VALUES ('key_1', 'org_1', NULL, 'hash', '[]', '[]', TRUE, \
                '{OLD}')"
        ),
        format!(
            "INSERT INTO access_tokens (token_hash, key_id, created, expires) VALUES \
            ('t_expired', 'key_1', '{OLD}', '{OLD}'), ('t_valid', 'key_1', '{OLD}', '2999-01-01 \
                00:00:00')"
        ),
    ] {
        raw_execute(url, &sql);
    }
    // Cards: (id, status, updated).
    let cards = [
        (old("crd", "active"), "active", OLD.to_owned()),
        (old("crd", "snoozed"), "snoozed", OLD.to_owned()),
        (old("crd", "embargoed"), "embargoed", OLD.to_owned()),
        (old("crd", "closed"), "completed", OLD.to_owned()),
        (old("crd", "pushing"), "dismissed", OLD.to_owned()),
        (old("crd", "delivering"), "expired", OLD.to_owned()),
        (old("crd", "justclosed"), "completed", now.clone()),
    ];
    for (id, status, updated) in &cards {
        raw_execute(
            url,
            &format!(
                "INSERT INTO card_instances (id, environment_id, user_id, flow_instance_id, \
                invocation_id, flow_id, flow_version, step_id, template_id, template_name, status, \
                    priority, stream_ids, platforms, content, context, created, updated) \
             VALUES ('{id}', 'env_a', 'u1', 'fin_{id}', 'inv_{id}', 'flw_1', 1, 's1', 't1', 'T', \
                 '{status}', 0, '[]', '[]', '{{}}', '{{}}', {}, {})",
                at(OLD),
                at(updated)
            ),
        );
    }
    // Events: one old without deliveries, one old whose delivery is pending, one fresh.
    for (id, card, created) in [
        (old("evt", "gone"), old("crd", "closed"), OLD.to_owned()),
        (
            old("evt", "pending"),
            old("crd", "delivering"),
            OLD.to_owned(),
        ),
        (fresh("evt", "new"), old("crd", "active"), now.clone()),
    ] {
        raw_execute(
            url,
            &format!(
            "INSERT INTO analytics_events (id, environment_id, card_instance_id, name, status, \
                created) VALUES ('{id}', 'env_a', '{card}', 'card-published', 'active', {})",
            at(&created)
        ),
        );
    }
    for (id, event, status) in [
        (old("whd", "pending"), old("evt", "pending"), "pending"),
        (old("whd", "done"), old("evt", "gone"), "delivered"),
    ] {
        raw_execute(
            url,
            &format!(
                "INSERT INTO webhook_deliveries (id, environment_id, subscription_id, event_id, \
                event_name, status, attempts, next_attempt_at, created, updated, trigger_kind) \
             VALUES ('{id}', 'env_a', 'whk_1', '{event}', 'card-published', '{status}', 1, \
                 '{OLD}', '{OLD}', '{OLD}', 'event')"
            ),
        );
    }
    for (id, delivery) in [
        (old("wha", "done"), old("whd", "done")),
        (old("wha", "live"), old("whd", "pending")),
    ] {
        raw_execute(
            url,
            &format!(
            "INSERT INTO webhook_attempts (id, subscription_id, delivery_id, event_id, event_name, \
                attempt, duration_ms, response_body, created, trigger_kind) \
             VALUES ('{id}', 'whk_1', '{delivery}', 'evt_x', 'card-published', 1, 5, '', {}, \
                 'event')",
            at(OLD)
        ),
        );
    }
    for (id, card, status) in [
        (old("psh", "pending"), old("crd", "pushing"), "pending"),
        (old("psh", "sent"), old("crd", "closed"), "sent"),
    ] {
        raw_execute(
            url,
            &format!(
            "INSERT INTO push_jobs (id, environment_id, card_instance_id, user_id, token, app_id, \
                platform, status, attempts, next_attempt_at, created, updated) \
             VALUES ('{id}', 'env_a', '{card}', 'u1', 'tok', 'app', 'fcm', '{status}', 0, '{OLD}', \
                 '{OLD}', '{OLD}')"
        ),
        );
    }
    // A final invocation with a card still open stays, for cancels to reach that card; one
    // whose open card's instance was stopped (cancelled, its cards left) goes.
    for (card, invocation, instance_status) in [
        (old("crd", "kept"), "inv_kept", "active"),
        (old("crd", "stopped"), "inv_stopped", "cancelled"),
    ] {
        raw_execute(
            url,
            &format!(
                "INSERT INTO card_instances (id, environment_id, user_id, flow_instance_id, \
                invocation_id, flow_id, flow_version, step_id, template_id, template_name, status, \
                    priority, stream_ids, platforms, content, context, created, updated, \
                        instance_status) \
             VALUES ('{card}', 'env_a', 'u1', 'fin_{invocation}', '{invocation}', 'flw_1', 1, \
                 's1', 't1', 'T', 'active', 0, '[]', '[]', '{{}}', '{{}}', {}, {}, \
                     '{instance_status}')",
                at(OLD),
                at(OLD)
            ),
        );
    }
    // Contract §21: a final invocation stays while an instance of its waits, and so does that
    // instance's closed card (a `wait-for-card` step may yet read it); one whose instances
    // have all ended goes, with them.
    raw_execute(
        url,
        &format!(
        "INSERT INTO card_instances (id, environment_id, user_id, flow_instance_id, invocation_id, \
            flow_id, flow_version, step_id, template_id, template_name, status, priority, \
                stream_ids, platforms, content, context, created, updated, instance_status) \
         VALUES ('{}', 'env_a', 'u1', 'fin_waits', 'inv_waits', 'flw_1', 1, 's1', 't1', 'T', \
             'completed', 0, '[]', '[]', '{{}}', '{{}}', {}, {}, 'active')",
        old("crd", "waits"),
        at(OLD),
        at(OLD)
    ),
    );
    for (instance, invocation, status) in [
        ("fin_waits", "inv_waits", "active"),
        ("fin_ended", "inv_ended", "completed"),
    ] {
        raw_execute(
            url,
            &format!(
            "INSERT INTO flow_instances (environment_id, id, invocation_id, flow_id, flow_version, \
                user_id, status, steps, due, revision, created, updated) \
             VALUES ('env_a', '{instance}', '{invocation}', 'flw_1', 1, 'u1', '{status}', '{{}}', \
                 NULL, 0, {}, {})",
            at(OLD),
            at(OLD)
        ),
        );
    }
    for invocation in ["inv_waits", "inv_ended"] {
        raw_execute(
            url,
            &format!(
                "INSERT INTO instance_counts (environment_id, invocation_id, step_id, metric, n) \
             VALUES ('env_a', '{invocation}', '', 'completed', 1)"
            ),
        );
    }
    for (id, status, updated) in [
        ("inv_waits", "completed", OLD.to_owned()),
        ("inv_ended", "completed", OLD.to_owned()),
        ("inv_kept", "completed", OLD.to_owned()),
        ("inv_stopped", "cancelled", OLD.to_owned()),
        ("inv_pending", "pending", OLD.to_owned()),
        ("inv_running", "running", OLD.to_owned()),
        ("my-own-id", "completed", OLD.to_owned()),
        ("inv_fresh", "completed", now.clone()),
    ] {
        insert_invocation(url, "env_a", id, status, &at(OLD), &at(&updated));
    }
    for (id, status) in [(1, "completed"), (2, "processing")] {
        raw_execute(
            url,
            &format!(
                "INSERT INTO bulk_tasks (id, environment_id, flow_id, mode, status, rows_total, \
                rows_processed, rows_failed, errors, cursor, created, updated) \
             VALUES ({id}, 'env_a', 'flw_1', 'live', '{status}', 3, 3, 0, '[]', 3, '{OLD}', \
                 '{OLD}')"
            ),
        );
        // Its three rows in two chunks: rows 1 and 2, then row 3.
        for (first, last, count, cells) in [(1, 2, 2, "[[1,[]],[2,[]]]"), (3, 3, 1, "[[3,[]]]")] {
            raw_execute(
                url,
                &format!(
                    "INSERT INTO bulk_chunks (task_id, last_row, first_row, row_count, cells) \
                     VALUES ({id}, {last}, {first}, {count}, '{cells}')"
                ),
            );
        }
    }
}

/// Stores an invocation `id` of `flw_1` in `env`, `status`, created and updated at the SQL
/// times `created` and `updated`.
fn insert_invocation(url: &str, env: &str, id: &str, status: &str, created: &str, updated: &str) {
    raw_execute(
        url,
        &format!(
            "INSERT INTO invocations (environment_id, id, flow_id, mode, flow_version, \
             fingerprint, target, payload, strict_variables, bulk, status, users_targeted, \
             cards_created, errors, attempts, created, updated) \
             VALUES ('{env}', '{id}', 'flw_1', 'live', 1, 'f', '{{}}', '{{}}', FALSE, FALSE, \
             '{status}', 1, 1, '[]', 0, {created}, {updated})"
        ),
    );
}

fn ids(url: &str, table: &str, column: &str) -> Vec<String> {
    let mut ids = raw_texts(
        url,
        &format!("SELECT {column} AS v FROM {table} ORDER BY 1"),
    );
    ids.sort();
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn pruner(db: &Database, holder: &str) -> Pruner {
    Pruner::new(
        Arc::new(DieselPruneRepository::new(db.clone())),
        Arc::new(SystemClock),
        RetentionPolicy::all(Retention::parse("1d").expect("retention")),
        holder.into(),
    )
}

async fn open_cards_and_pending_work_survive_a_prune_and_closed_ones_go(url: &str) {
    let db = Database::connect(url, 4).expect("connect and migrate");
    seed(url);
    let everything = |url: &str| {
        [
            ("card_instances", "id"),
            ("analytics_events", "id"),
            ("webhook_deliveries", "id"),
            ("webhook_attempts", "id"),
            ("push_jobs", "id"),
            ("invocations", "id"),
            ("bulk_tasks", "CAST(id AS TEXT)"),
            (
                "bulk_chunks",
                "CAST(task_id AS TEXT) || '/' || CAST(last_row AS TEXT)",
            ),
            ("access_tokens", "token_hash"),
        ]
        .map(|(table, column)| ids(url, table, column))
    };
    let before = everything(url);

    // A dry run counts and removes nothing.
    let dry = pruner(&db, "p1")
        .pass(true)
        .await
        .expect("dry run")
        .expect("counted");
    let expected = [
        (PruneKind::Cards, 1),
        (PruneKind::Events, 1),
        (PruneKind::Deliveries, 1),
        (PruneKind::Attempts, 1),
        (PruneKind::PushJobs, 1),
        (PruneKind::Invocations, 3),
        // Stored rows are counted as stored: two chunks, of three CSV rows.
        (PruneKind::BulkRows, 2),
        (PruneKind::BulkTasks, 1),
        (PruneKind::AccessTokens, 1),
    ];
    for (kind, n) in expected {
        assert_eq!(dry.get(kind), n, "dry run of {kind:?}");
    }
    assert_eq!(everything(url), before);

    // One process at a time: while another holds the lease, a pass does nothing; once it is
    // let go, it prunes.
    let repo = DieselPruneRepository::new(db.clone());
    let now = chrono::Utc::now();
    let hour = chrono::Duration::hours(1);
    assert!(repo.lease("other", now, now + hour).await.expect("lease"));
    assert!(!repo.lease("p1", now, now + hour).await.expect("lease"));
    assert_eq!(pruner(&db, "p1").pass(false).await.expect("pass"), None);
    assert_eq!(everything(url), before);
    assert!(repo.lease("other", now, now - hour).await.expect("let go"));
    let counts = pruner(&db, "p1")
        .pass(false)
        .await
        .expect("pass")
        .expect("leased");
    // The rows of a finished task go first, the task itself once they are gone.
    for (kind, n) in expected {
        assert_eq!(counts.get(kind), n, "{kind:?}");
    }
    assert_eq!(
        ids(url, "card_instances", "id"),
        sorted(vec![
            old("crd", "active"),
            old("crd", "snoozed"),
            old("crd", "embargoed"),
            old("crd", "pushing"),
            old("crd", "delivering"),
            old("crd", "justclosed"),
            old("crd", "kept"),
            old("crd", "stopped"),
            old("crd", "waits"),
        ])
    );
    assert_eq!(
        ids(url, "analytics_events", "id"),
        sorted(vec![old("evt", "pending"), fresh("evt", "new")])
    );
    assert_eq!(
        ids(url, "webhook_deliveries", "id"),
        [old("whd", "pending")]
    );
    assert_eq!(ids(url, "webhook_attempts", "id"), [old("wha", "live")]);
    assert_eq!(ids(url, "push_jobs", "id"), [old("psh", "pending")]);
    assert_eq!(
        ids(url, "invocations", "id"),
        [
            "inv_fresh",
            "inv_kept",
            "inv_pending",
            "inv_running",
            "inv_waits"
        ]
    );
    assert_eq!(ids(url, "flow_instances", "id"), ["fin_waits"]);
    assert_eq!(
        ids(url, "instance_counts", "invocation_id"),
        ["inv_waits"],
        "an invocation's counts go with it"
    );
    assert_eq!(ids(url, "bulk_tasks", "CAST(id AS TEXT)"), ["2"]);
    assert_eq!(
        raw_texts(
            url,
            "SELECT CAST(SUM(row_count) AS TEXT) AS v FROM bulk_chunks"
        ),
        ["3"]
    );
    assert_eq!(ids(url, "access_tokens", "token_hash"), ["t_valid"]);

    // Nothing left to do: the next pass removes nothing.
    let again = pruner(&db, "p1")
        .pass(false)
        .await
        .expect("pass")
        .expect("leased");
    assert_eq!(again.total(), 0);
}

/// Final invocations go a batch at a time in the order they ended, each batch after the last
/// one the batch before looked at: one kept for its open card is looked at once, not again by
/// every later batch.
async fn invocations_go_batch_by_batch_past_the_ones_kept(url: &str) {
    let db = Database::connect(url, 4).expect("connect and migrate");
    seed(url);
    // Beside the seed's: one ended at the same instant in another environment, and one ended
    // a fraction of a second later with an open card.
    raw_execute(
        url,
        &format!(
        "INSERT INTO environments (id, organisation_id, name, created) VALUES ('env_b', 'org_1', \
            'b', '{OLD}')"
    ),
    );
    let late = "2020-01-01 00:00:00.123";
    for (env, id, ended) in [("env_b", "inv_0", OLD), ("env_a", "inv_late", late)] {
        insert_invocation(
            url,
            env,
            id,
            "completed",
            &instant(url, OLD),
            &instant(url, ended),
        );
    }
    raw_execute(
        url,
        &format!(
        "INSERT INTO card_instances (id, environment_id, user_id, flow_instance_id, invocation_id, \
            flow_id, flow_version, step_id, template_id, template_name, status, priority, \
                stream_ids, platforms, content, context, created, updated) \
         VALUES ('{}', 'env_a', 'u1', 'fin_late', 'inv_late', 'flw_1', 1, 's1', 't1', 'T', \
             'active', 0, '[]', '[]', '{{}}', '{{}}', {}, {})",
        old("crd", "late"),
        instant(url, OLD),
        instant(url, OLD)
    ),
    );
    let repo = DieselPruneRepository::new(db.clone());
    let cutoff = chrono::Utc::now() - chrono::Duration::days(1);
    let (mut after, mut removed) = (None, Vec::new());
    loop {
        let batch = repo
            .prune(PruneKind::Invocations, cutoff, after, 1, false)
            .await
            .expect("batch");
        removed.push(batch.removed.iter().map(|(_, n)| n).sum::<u64>());
        after = batch.next;
        if after.is_none() {
            break;
        }
        assert!(removed.len() < 10, "{removed:?}");
    }
    // inv_ended, inv_kept (kept), inv_stopped, inv_waits (kept), my-own-id, env_b's inv_0,
    // inv_late (kept), then nothing.
    assert_eq!(removed, [1, 0, 1, 0, 1, 1, 0, 0]);
    assert_eq!(
        ids(url, "invocations", "id"),
        [
            "inv_fresh",
            "inv_kept",
            "inv_late",
            "inv_pending",
            "inv_running",
            "inv_waits"
        ]
    );
}

async fn sqlite_databases_new_and_old_give_freed_pages_back(url: &str) {
    if url.starts_with("sqlite://") {
        // A file made without incremental auto-vacuum (as every older version made them) is
        // converted once, at start.
        raw_execute(url, "CREATE TABLE older (a TEXT)");
        assert_eq!(
            raw_texts(
                url,
                "SELECT CAST(auto_vacuum AS TEXT) AS v FROM pragma_auto_vacuum"
            ),
            ["0"]
        );
    }
    let _db = Database::connect(url, 1).expect("connect and migrate");
    if url.starts_with("sqlite://") {
        assert_eq!(
            raw_texts(
                url,
                "SELECT CAST(auto_vacuum AS TEXT) AS v FROM pragma_auto_vacuum"
            ),
            ["2"]
        );
    }
}

both_backends!(
    invocations_go_batch_by_batch_past_the_ones_kept,
    open_cards_and_pending_work_survive_a_prune_and_closed_ones_go,
    sqlite_databases_new_and_old_give_freed_pages_back,
);
