use chrono::TimeZone;
use serde_json::json;

use super::*;
use crate::tenancy::{KeyAccess, Role};

fn who() -> Principal {
    Principal {
        key_id: "key_1".into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Roles(vec![Role::Workbench]),
        environment_ids: vec!["env_1".into()],
        end_user: None,
    }
}

fn service(
    repo: MockPushPlatformRepository,
    validator: MockCredentialValidator,
) -> PushPlatformService {
    let mut clock = crate::time::MockClock::new();
    clock.expect_now().returning(|| {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, 10, 0, 0)
            .single()
            .expect("time")
    });
    PushPlatformService::new(Arc::new(repo), Arc::new(validator), Arc::new(clock))
}

fn body() -> Value {
    json!({"appId": "app", "platform": "FCM", "platformCredential": "{}"})
}

#[tokio::test]
async fn create_maps_legacy_keys_and_duplicates() {
    let mut validator = MockCredentialValidator::new();
    validator
        .expect_validate()
        .returning(|_, _| Err(CredentialProblem::LegacyFcmKey));
    let err = service(MockPushPlatformRepository::new(), validator)
        .create(&who(), &"env_1".into(), &body())
        .await
        .expect_err("legacy");
    assert!(matches!(err, DomainError::LegacyFcmKey(ref m) if m.contains("HTTP v1")));

    let mut validator = MockCredentialValidator::new();
    validator
        .expect_validate()
        .returning(|_, _| Ok(BTreeMap::from([("ProjectId".into(), "p".into())])));
    let mut repo = MockPushPlatformRepository::new();
    repo.expect_insert()
        .returning(|_| Err(StorageError::UniqueViolation("push_platforms".into())));
    let err = service(repo, validator)
        .create(&who(), &"env_1".into(), &body())
        .await
        .expect_err("duplicate");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::PlatformExists,
            ..
        }
    ));

    let mut validator = MockCredentialValidator::new();
    validator
        .expect_validate()
        .returning(|_, _| Ok(BTreeMap::new()));
    let mut repo = MockPushPlatformRepository::new();
    repo.expect_insert()
        .withf(|p| p.enabled && p.arn == "arn:workbench:push:env_1:app/FCM/app")
        .returning(|_| Ok(()));
    let p = service(repo, validator)
        .create(&who(), &"env_1".into(), &body())
        .await
        .expect("created");
    assert_eq!(p.attributes()["Enabled"], "true");
}

#[tokio::test]
async fn only_disabled_platforms_are_deleted() {
    let platform = PushPlatform {
        id: "npl_1".into(),
        environment_id: "env_1".into(),
        app_id: "app".into(),
        platform: "FCM".into(),
        arn: arn("env_1", "FCM", "app"),
        enabled: true,
        credential: "{}".into(),
        principal: None,
        properties: Map::new(),
        facts: BTreeMap::new(),
        created: chrono::Utc::now(),
        updated: chrono::Utc::now(),
    };
    let enabled = platform.clone();
    let mut repo = MockPushPlatformRepository::new();
    repo.expect_find()
        .returning(move |_, _, _| Ok(Some(enabled.clone())));
    repo.expect_delete_disabled().never();
    let err = service(repo, MockCredentialValidator::new())
        .delete(
            &who(),
            &"env_1".into(),
            &json!({"appId": "app", "platform": "FCM"}),
        )
        .await
        .expect_err("enabled");
    assert!(matches!(
        err,
        DomainError::Conflict {
            kind: ConflictKind::PlatformEnabled,
            ..
        }
    ));
    let mut disabled = platform;
    disabled.enabled = false;
    let mut repo = MockPushPlatformRepository::new();
    repo.expect_find()
        .returning(move |_, _, _| Ok(Some(disabled.clone())));
    repo.expect_delete_disabled()
        .times(1)
        .returning(|_, _| Ok(true));
    service(repo, MockCredentialValidator::new())
        .delete(
            &who(),
            &"env_1".into(),
            &json!({"appId": "app", "platform": "FCM"}),
        )
        .await
        .expect("deleted");
}
