//! One schema for both backends: only types diesel's MultiConnection supports
//! (Text, Bool, Timestamp). Kept by hand in step with `migrations/{sqlite,postgres}`; the
//! contract tests (which write and read back every column on both backends) catch drift.

diesel::table! {
    organisations (id) {
        id -> Text,
        name -> Text,
        created -> Timestamp,
    }
}

diesel::table! {
    environments (id) {
        id -> Text,
        organisation_id -> Text,
        name -> Text,
        created -> Timestamp,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Text,
        organisation_id -> Text,
        name -> Nullable<Text>,
        secret_hash -> Text,
        roles -> Text,
        scopes -> Text,
        all_environments -> Bool,
        created -> Timestamp,
        revoked -> Nullable<Timestamp>,
        last_used -> Nullable<Timestamp>,
    }
}

diesel::table! {
    api_key_environments (key_id, environment_id) {
        key_id -> Text,
        environment_id -> Text,
    }
}

diesel::table! {
    access_tokens (token_hash) {
        token_hash -> Text,
        key_id -> Text,
        created -> Timestamp,
        expires -> Timestamp,
    }
}

diesel::table! {
    folders (id) {
        id -> Text,
        environment_id -> Text,
        organisation_id -> Text,
        parent_id -> Nullable<Text>,
        name -> Text,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::joinable!(environments -> organisations (organisation_id));
diesel::joinable!(api_keys -> organisations (organisation_id));
diesel::joinable!(api_key_environments -> api_keys (key_id));
diesel::joinable!(access_tokens -> api_keys (key_id));

diesel::table! {
    environment_settings (environment_id) {
        environment_id -> Text,
        approvals_enabled -> Bool,
        updated -> Timestamp,
    }
}

diesel::table! {
    action_flows (id) {
        id -> Text,
        environment_id -> Text,
        organisation_id -> Text,
        name -> Text,
        name_folded -> Text,
        description -> Text,
        folder_id -> Nullable<Text>,
        archived -> Bool,
        latest_version -> Integer,
        published_version -> Nullable<Integer>,
        draft_version -> Nullable<Integer>,
        variables -> Text,
        revision -> BigInt,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    action_flow_versions (flow_id, version) {
        flow_id -> Text,
        version -> Integer,
        status -> Text,
        config -> Text,
        created_by -> Text,
        approved_by -> Nullable<Text>,
        approved -> Nullable<Timestamp>,
        published -> Nullable<Timestamp>,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::joinable!(action_flow_versions -> action_flows (flow_id));

diesel::table! {
    end_users (environment_id, id) {
        environment_id -> Text,
        id -> Text,
        test_user -> Bool,
        attributes -> Text,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    end_user_tags (environment_id, tag, user_id) {
        environment_id -> Text,
        tag -> Text,
        user_id -> Text,
    }
}

diesel::table! {
    segments (id) {
        id -> Text,
        environment_id -> Text,
        name -> Text,
        filter -> Text,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    streams (id) {
        id -> Text,
        environment_id -> Text,
        name -> Text,
        is_default -> Bool,
        created -> Timestamp,
    }
}

diesel::table! {
    sdk_keys (id) {
        id -> Text,
        environment_id -> Text,
        name -> Text,
        public_keys -> Text,
        max_token_expiry_days -> Integer,
        allowed_issuers -> Text,
        claim_mappings -> Text,
        created -> Timestamp,
        updated -> Timestamp,
        allowed_origins -> Text,
    }
}

diesel::table! {
    editor_texts (environment_id, flow_id, version) {
        environment_id -> Text,
        flow_id -> Text,
        version -> Integer,
        text -> Text,
    }
}

diesel::table! {
    stream_tickets (hash) {
        hash -> Text,
        environment_id -> Text,
        end_user -> Text,
        kid -> Text,
        sdk_key_id -> Text,
        key_updated -> Timestamp,
        token_expires -> BigInt,
        expires -> Timestamp,
        used -> Bool,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    invocations (environment_id, id) {
        environment_id -> Text,
        id -> Text,
        flow_id -> Text,
        mode -> Text,
        flow_version -> Integer,
        fingerprint -> Text,
        target -> Text,
        payload -> Text,
        strict_variables -> Bool,
        bulk -> Bool,
        status -> Text,
        users_targeted -> BigInt,
        cards_created -> BigInt,
        errors -> Text,
        cursor -> Nullable<Text>,
        lease_until -> Nullable<Millis>,
        attempts -> Integer,
        created -> Millis,
        updated -> Millis,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    card_instances (id) {
        id -> Text,
        environment_id -> Text,
        user_id -> Text,
        flow_instance_id -> Text,
        invocation_id -> Text,
        flow_id -> Text,
        flow_version -> Integer,
        step_id -> Text,
        template_id -> Text,
        template_name -> Text,
        status -> Text,
        priority -> Integer,
        stream_ids -> Text,
        platforms -> Text,
        content -> Text,
        context -> Text,
        embargo_until -> Nullable<Millis>,
        expires_at -> Nullable<Millis>,
        snoozed_until -> Nullable<Millis>,
        published_at -> Nullable<Millis>,
        created -> Millis,
        updated -> Millis,
        instance_status -> Text,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    analytics_events (id) {
        id -> Text,
        environment_id -> Text,
        card_instance_id -> Text,
        name -> Text,
        status -> Text,
        previous_status -> Nullable<Text>,
        submitted -> Nullable<Text>,
        published_at -> Nullable<Millis>,
        created -> Millis,
    }
}

diesel::table! {
    webhook_subscriptions (id) {
        id -> Text,
        environment_id -> Text,
        url -> Text,
        method -> Text,
        headers -> Text,
        types -> Text,
        card_template_id -> Nullable<Text>,
        flow_id -> Nullable<Text>,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_until -> Nullable<Timestamp>,
        enabled -> Bool,
        disabled_reason -> Nullable<Text>,
        failing_since -> Nullable<Timestamp>,
        created -> Timestamp,
        updated -> Timestamp,
        description -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Text,
        environment_id -> Text,
        subscription_id -> Text,
        event_id -> Text,
        event_name -> Text,
        status -> Text,
        attempts -> Integer,
        trigger_kind -> Text,
        next_attempt_at -> Timestamp,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    webhook_attempts (id) {
        id -> Text,
        subscription_id -> Text,
        delivery_id -> Nullable<Text>,
        event_id -> Text,
        event_name -> Text,
        attempt -> Integer,
        trigger_kind -> Text,
        status_code -> Nullable<Integer>,
        error -> Nullable<Text>,
        duration_ms -> BigInt,
        response_body -> Text,
        next_attempt_at -> Nullable<Millis>,
        created -> Millis,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    cancel_tasks (id) {
        id -> Text,
        environment_id -> Text,
        flow_id -> Text,
        end_user_id -> Nullable<Text>,
        invocation_id -> Nullable<Text>,
        flow_version -> Nullable<Integer>,
        cancel_cards -> Bool,
        status -> Text,
        expected -> Nullable<BigInt>,
        actual -> BigInt,
        cards_expected -> Nullable<BigInt>,
        cards_actual -> BigInt,
        errors -> Text,
        lease_until -> Nullable<Timestamp>,
        created -> Timestamp,
        updated -> Timestamp,
        cursor_created -> Nullable<Millis>,
        cursor_invocation -> Nullable<Text>,
        cursor_user -> Nullable<Text>,
        before_version -> Nullable<Integer>,
    }
}

diesel::table! {
    bulk_tasks (id) {
        id -> BigInt,
        environment_id -> Text,
        flow_id -> Text,
        mode -> Text,
        status -> Text,
        header -> Nullable<Text>,
        rows_total -> BigInt,
        rows_processed -> BigInt,
        rows_failed -> BigInt,
        errors -> Text,
        cursor -> BigInt,
        lease_until -> Nullable<Timestamp>,
        created -> Timestamp,
        updated -> Timestamp,
        queued -> Bool,
    }
}

diesel::table! {
    bulk_chunks (task_id, last_row) {
        task_id -> BigInt,
        last_row -> BigInt,
        first_row -> BigInt,
        row_count -> Integer,
        cells -> Text,
    }
}

diesel::table! {
    push_platforms (id) {
        id -> Text,
        environment_id -> Text,
        app_id -> Text,
        platform -> Text,
        arn -> Text,
        enabled -> Bool,
        credential -> Text,
        principal -> Nullable<Text>,
        properties -> Text,
        facts -> Text,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    devices (environment_id, token) {
        environment_id -> Text,
        token -> Text,
        user_id -> Text,
        app_id -> Text,
        platform -> Text,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    push_jobs (id) {
        id -> Text,
        environment_id -> Text,
        card_instance_id -> Text,
        user_id -> Text,
        token -> Text,
        app_id -> Text,
        platform -> Text,
        status -> Text,
        attempts -> Integer,
        status_code -> Nullable<Integer>,
        error -> Nullable<Text>,
        next_attempt_at -> Timestamp,
        created -> Timestamp,
        updated -> Timestamp,
    }
}

diesel::table! {
    flow_folders (flow_id, since) {
        flow_id -> Text,
        since -> Timestamp,
        folder_id -> Text,
    }
}

diesel::table! {
    flow_totals (environment_id, flow_id, day, flow_version, folder_id, mode, metric, shard) {
        environment_id -> Text,
        flow_id -> Text,
        day -> Text,
        flow_version -> Integer,
        folder_id -> Text,
        mode -> Text,
        metric -> Text,
        shard -> Integer,
        n -> BigInt,
    }
}

diesel::table! {
    leases (name) {
        name -> Text,
        holder -> Text,
        until -> Timestamp,
    }
}

diesel::joinable!(analytics_events -> card_instances (card_instance_id));

diesel::table! {
    use diesel::sql_types::*;
    use crate::millis::Millis;

    flow_instances (environment_id, id) {
        environment_id -> Text,
        id -> Text,
        invocation_id -> Text,
        flow_id -> Text,
        flow_version -> Integer,
        user_id -> Text,
        status -> Text,
        steps -> Text,
        due -> Nullable<Millis>,
        lease_until -> Nullable<Millis>,
        revision -> BigInt,
        created -> Millis,
        updated -> Millis,
    }
}

diesel::table! {
    instance_counts (environment_id, invocation_id, step_id, metric) {
        environment_id -> Text,
        invocation_id -> Text,
        step_id -> Text,
        metric -> Text,
        n -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    flow_instances,
    instance_counts,
    sdk_keys,
    stream_tickets,
    editor_texts,
    flow_folders,
    leases,
    flow_totals,
    organisations,
    environments,
    api_keys,
    api_key_environments,
    access_tokens,
    folders,
    environment_settings,
    action_flows,
    action_flow_versions,
    end_users,
    end_user_tags,
    segments,
    streams,
    invocations,
    card_instances,
    analytics_events,
    webhook_subscriptions,
    webhook_deliveries,
    webhook_attempts,
    cancel_tasks,
    bulk_tasks,
    bulk_chunks,
    push_platforms,
    devices,
    push_jobs,
);
