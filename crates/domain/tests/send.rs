//! Every public async method of every service returns a `Send` future, so a service can be
//! called from `tokio::spawn` on a multi-threaded runtime. The assertion is the compilation:
//! [`futures`] is never run, and a method whose future is not `Send` fails to build this test.

use std::sync::Arc;

/// A value of any type, for arguments: the calls are type-checked, never made.
fn any<T>() -> T {
    unreachable!("only type-checked")
}

fn send<T: Send>(_: T) {}

/// Each service's methods, called with arguments of any value.
#[allow(clippy::too_many_arguments)]
fn futures(
    audience_service: Arc<workbench_domain::audience::AudienceService>,
    bulk_service: Arc<workbench_domain::bulk::BulkService>,
    cancel_service: Arc<workbench_domain::cancel::CancelService>,
    card_service: Arc<workbench_domain::card::CardService>,
    flow_service: Arc<workbench_domain::flow::FlowService>,
    folder_service: Arc<workbench_domain::folder::FolderService>,
    push_platform_service: Arc<workbench_domain::push::PushPlatformService>,
    device_service: Arc<workbench_domain::push::DeviceService>,
    push_service: Arc<workbench_domain::push::PushService>,
    auth_service: Arc<workbench_domain::tenancy::AuthService>,
    task_service: Arc<workbench_domain::tasks::TaskService>,
    trigger_service: Arc<workbench_domain::trigger::TriggerService>,
    engine: Arc<workbench_domain::trigger::Engine>,
    waits: Arc<workbench_domain::trigger::waits::Waits>,
    delivery_service: Arc<workbench_domain::webhook::DeliveryService>,
    webhook_service: Arc<workbench_domain::webhook::WebhookService>,
    editor_service: Arc<workbench_domain::flow::texts::EditorService>,
    stats_service: Arc<workbench_domain::stats::StatsService>,
) {
    send(editor_service.save_text(any(), any(), any(), any(), any()));
    send(editor_service.text(any(), any(), any()));
    send(stats_service.flow(any(), any(), any(), any()));
    send(stats_service.folder(any(), any(), any(), any()));
    send(stats_service.steps(any(), any(), any(), any(), any()));
    send(flow_service.publish_edited(any(), any(), any(), any()));
    send(flow_service.save_edit(any(), any(), any(), any()));
    send(flow_service.preview(any(), any(), any(), any(), any()));
    send(audience_service.set_test_user(any(), any(), any(), any()));
    send(audience_service.put_user(any(), any(), any()));
    send(audience_service.put_users(any(), any(), any()));
    send(audience_service.get_user(any(), any(), any()));
    send(audience_service.delete_user(any(), any(), any()));
    send(audience_service.list_users(any(), any(), any(), any(), any()));
    send(audience_service.create_segment(any(), any(), any(), any()));
    send(audience_service.get_segment(any(), any(), any()));
    send(audience_service.list_segments(any(), any()));
    send(audience_service.update_segment(any(), any(), any(), any(), any()));
    send(audience_service.delete_segment(any(), any(), any()));
    send(audience_service.list_streams(any(), any()));
    send(audience_service.create_stream(any(), any(), any()));
    send(audience_service.delete_stream(any(), any(), any()));
    send(bulk_service.create(any(), any(), any(), any()));
    send(bulk_service.status(any(), any(), any(), any()));
    send(bulk_service.begin_upload(any()));
    send(bulk_service.add_rows(any(), any()));
    send(bulk_service.finish_upload(any(), any(), any()));
    send(bulk_service.fail_upload(any(), any()));
    send(bulk_service.step());
    send(cancel_service.start(any(), any(), any(), any()));
    send(cancel_service.status(any(), any(), any(), any()));
    send(cancel_service.step());
    send(card_service.feed(any(), any(), any(), any()));
    send(card_service.act(any(), any(), any(), any(), any()));
    send(card_service.events(any(), any(), any(), any()));
    send(card_service.tick(any()));
    send(flow_service.create(any(), any(), any()));
    send(flow_service.get(any(), any(), any()));
    send(flow_service.list(any(), any(), any(), any()));
    send(flow_service.update(any(), any(), any(), any()));
    send(flow_service.get_config(any(), any(), any(), any()));
    send(flow_service.publish(any(), any(), any(), any()));
    send(flow_service.save_draft(any(), any(), any(), any()));
    send(flow_service.discard_draft(any(), any(), any()));
    send(flow_service.approve_draft(any(), any(), any()));
    send(flow_service.publish_draft(any(), any(), any()));
    send(flow_service.set_archived(any(), any(), any(), any()));
    send(flow_service.settings(any(), any()));
    send(flow_service.put_settings(any(), any(), any()));
    send(folder_service.list(any(), any()));
    send(folder_service.get(any(), any(), any()));
    send(folder_service.create(any(), any(), any()));
    send(folder_service.rename(any(), any(), any(), any()));
    send(folder_service.delete(any(), any(), any()));
    send(push_platform_service.list(any(), any()));
    send(push_platform_service.create(any(), any(), any()));
    send(push_platform_service.update(any(), any(), any()));
    send(push_platform_service.set_enabled(any(), any(), any()));
    send(push_platform_service.delete(any(), any(), any()));
    send(device_service.register(any(), any(), any(), any(), any()));
    send(device_service.list(any(), any(), any()));
    send(device_service.unregister(any(), any(), any(), any()));
    send(push_service.claim(any(), any()));
    send(push_service.attempt(any()));
    send(push_service.record(any()));
    send(push_service.of_card(any(), any(), any(), any()));
    send(auth_service.authenticate(any()));
    send(auth_service.authenticate_for(any(), any()));
    send(auth_service.exchange_client_credentials(any(), any()));
    send(auth_service.list_environments(any()));
    send(auth_service.create_credential(any(), any(), any()));
    send(auth_service.revoke_credential(any(), any(), any()));
    send(auth_service.default_organisation());
    send(auth_service.create_environment(any()));
    send(auth_service.create_key(any(), any(), any(), any()));
    send(auth_service.bootstrap());
    send(trigger_service.trigger_body(any(), any(), any(), any(), any()));
    send(trigger_service.trigger(any(), any(), any(), any(), any()));
    send(trigger_service.prepare_elements(any(), any(), any(), any()));
    send(trigger_service.record_prepared(any()));
    send(trigger_service.invocation(any(), any(), any(), any()));
    send(trigger_service.invocations(any(), any(), any(), any(), any()));
    send(task_service.list(any(), any(), any(), any(), any()));
    send(engine.step());
    send(waits.step());
    send(delivery_service.claim(any(), any(), any(), any()));
    send(delivery_service.attempt(any()));
    send(delivery_service.record(any()));
    send(webhook_service.subscribe(any(), any(), any()));
    send(webhook_service.list(any(), any()));
    send(webhook_service.get(any(), any(), any()));
    send(webhook_service.disable(any(), any(), any()));
    send(webhook_service.enable(any(), any(), any()));
    send(webhook_service.delete(any(), any(), any()));
    send(webhook_service.rotate_secret(any(), any(), any()));
    send(webhook_service.attempts(any(), any(), any(), any()));
    send(webhook_service.resend(any(), any(), any(), any()));
    send(webhook_service.recover(any(), any(), any(), any()));
    send(webhook_service.test(any(), any(), any()));
}

#[test]
fn every_service_future_is_send() {
    // Compiling `futures` is the test; this names it so that it is not dead code to the reader.
    let _ = futures;
}
