use std::sync::Arc;

use mockall::predicate::eq;

use super::*;
use crate::testing::{clock, t0};
use crate::time::MockClock;
use crate::Resource;
use chrono::Duration;

fn key(secret: &str, access: KeyAccess, environments: EnvironmentGrant) -> ApiKey {
    ApiKey {
        id: "key_1".into(),
        organisation_id: "org_1".into(),
        name: None,
        secret_hash: SecretHash::of(secret),
        access,
        environments,
        created: t0(),
        revoked: None,
    }
}

fn env(id: &str) -> Environment {
    Environment {
        id: id.into(),
        organisation_id: "org_1".into(),
        name: id.into(),
        created: t0(),
    }
}

#[test]
fn permission_table_matches_the_contract() {
    let legacy = |roles: &[Role]| KeyAccess::Roles(roles.to_vec());
    // Folders need scopes; no legacy role grants them.
    for p in [
        Permission::FoldersRead,
        Permission::FoldersCreate,
        Permission::FoldersUpdate,
        Permission::FoldersDelete,
    ] {
        assert!(!legacy(&Role::ALL).allows(p), "{p:?}");
        assert!(KeyAccess::Scopes(vec![p.scope()]).allows(p));
    }
    assert!(legacy(&[Role::Events]).allows(Permission::ActionFlowsTrigger));
    assert!(!legacy(&[Role::Workbench]).allows(Permission::ActionFlowsTrigger));
    assert!(legacy(&[Role::Workbench]).allows(Permission::WebhooksWrite));
    assert!(legacy(&[Role::Workbench]).allows(Permission::NotificationPlatformsRead));
    assert!(legacy(&[Role::Events]).allows(Permission::UsersWrite));
    assert!(legacy(&[Role::Workbench]).allows(Permission::UsersRead));
    assert!(legacy(&[Role::Auth]).allows(Permission::CredentialsWrite));
    assert!(!legacy(&[Role::Events]).allows(Permission::CredentialsWrite));
    let folders_read = KeyAccess::Scopes(vec![Scope::WorkbenchFoldersRead]);
    assert!(!folders_read.allows(Permission::FoldersCreate));
}

#[test]
fn scopes_and_roles_round_trip_through_their_names() {
    for s in Scope::ALL {
        assert_eq!(s.as_str().parse::<Scope>(), Ok(s));
    }
    for r in Role::ALL {
        assert_eq!(r.as_str().parse::<Role>(), Ok(r));
    }
    assert!("admin".parse::<Role>().is_err());
    assert!("folders:read".parse::<Scope>().is_err());
}

#[test]
fn authorize_says_401_for_foreign_environments_and_403_for_missing_permissions() {
    let p = Principal {
        key_id: "key_1".into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Roles(vec![Role::Events]),
        environment_ids: vec!["env_a".into()],
        end_user: None,
    };
    assert!(p.authorize("env_a", Permission::ActionFlowsRead).is_ok());
    assert!(matches!(
        p.authorize("env_b", Permission::ActionFlowsRead),
        Err(DomainError::Unauthenticated)
    ));
    match p.authorize("env_a", Permission::FoldersRead) {
        Err(DomainError::Forbidden(msg)) => {
            assert!(msg.contains("workbench_folders:read"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn authenticate_resolves_a_key_secret_and_its_environments() {
    let secret = "wbs_secret";
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key_by_secret_hash()
        .with(eq(SecretHash::of(secret)))
        .returning(move |_| {
            Ok(Some(key(
                "wbs_secret",
                KeyAccess::Scopes(vec![Scope::UsersRead]),
                EnvironmentGrant::All,
            )))
        });
    repo.expect_list_environments()
        .with(eq("org_1"))
        .returning(|_| Ok(vec![env("env_a"), env("env_b")]));
    let svc = AuthService::new(Arc::new(repo), clock());
    let p = svc.authenticate(secret).await.expect("authenticated");
    assert_eq!(p.environment_ids, ["env_a", "env_b"]);
    assert_eq!(p.key_id, "key_1");
}

#[tokio::test]
async fn authenticate_refuses_unknown_revoked_and_malformed_bearers() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key_by_secret_hash()
        .with(eq(SecretHash::of("wbs_unknown")))
        .returning(|_| Ok(None));
    repo.expect_find_key_by_secret_hash()
        .with(eq(SecretHash::of("wbs_revoked")))
        .returning(|_| {
            Ok(Some(ApiKey {
                revoked: Some(t0()),
                ..key(
                    "wbs_revoked",
                    KeyAccess::Roles(vec![Role::Events]),
                    EnvironmentGrant::All,
                )
            }))
        });
    let svc = AuthService::new(Arc::new(repo), clock());
    for bearer in ["wbs_unknown", "wbs_revoked", "", "not-a-secret"] {
        assert!(
            matches!(
                svc.authenticate(bearer).await,
                Err(DomainError::Unauthenticated)
            ),
            "{bearer}"
        );
    }
}

#[tokio::test]
async fn authenticate_accepts_live_tokens_and_refuses_expired_ones() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_access_token()
        .with(eq(SecretHash::of("wbt_live")))
        .returning(|_| {
            Ok(Some(AccessTokenGrant {
                token_hash: SecretHash::of("wbt_live"),
                key_id: "key_1".into(),
                created: t0(),
                expires: t0() + Duration::seconds(1),
            }))
        });
    repo.expect_find_access_token()
        .with(eq(SecretHash::of("wbt_expired")))
        .returning(|_| {
            Ok(Some(AccessTokenGrant {
                token_hash: SecretHash::of("wbt_expired"),
                key_id: "key_1".into(),
                created: t0() - Duration::hours(1),
                expires: t0(),
            }))
        });
    repo.expect_find_key().with(eq("key_1")).returning(|_| {
        Ok(Some(key(
            "wbs_x",
            KeyAccess::Roles(vec![Role::Events]),
            EnvironmentGrant::Only(vec!["env_a".into()]),
        )))
    });
    let svc = AuthService::new(Arc::new(repo), clock());
    assert_eq!(
        svc.authenticate("wbt_live")
            .await
            .expect("live")
            .environment_ids,
        ["env_a"]
    );
    assert!(matches!(
        svc.authenticate("wbt_expired").await,
        Err(DomainError::Unauthenticated)
    ));
}

#[tokio::test]
async fn client_credentials_exchange_issues_a_one_hour_token_stored_hashed() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key().with(eq("key_1")).returning(|_| {
        Ok(Some(key(
            "wbs_right",
            KeyAccess::Roles(vec![Role::Events]),
            EnvironmentGrant::All,
        )))
    });
    repo.expect_insert_access_token()
        .withf(|t| t.key_id == "key_1" && t.expires == t0() + Duration::seconds(3600))
        .times(1)
        .returning(|_| Ok(()));
    let svc = AuthService::new(Arc::new(repo), clock());
    let token = svc
        .exchange_client_credentials("key_1", "wbs_right")
        .await
        .expect("token");
    assert!(token.access_token.starts_with("wbt_"));
    assert_eq!(token.expires_in, 3600);
    assert!(matches!(
        svc.exchange_client_credentials("key_1", "wbs_wrong").await,
        Err(DomainError::Unauthenticated)
    ));
}

#[tokio::test]
async fn credentials_api_creates_single_role_keys_for_the_path_environment() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_insert_key()
        .withf(|k| {
            k.access == KeyAccess::Roles(vec![Role::Workbench])
                && k.environments == EnvironmentGrant::Only(vec!["env_a".into()])
                && k.organisation_id == "org_1"
        })
        .times(1)
        .returning(|_| Ok(()));
    let svc = AuthService::new(Arc::new(repo), clock());
    let auth = Principal {
        key_id: "key_admin".into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Roles(vec![Role::Auth, Role::Workbench]),
        environment_ids: vec!["env_a".into()],
        end_user: None,
    };
    let issued = svc
        .create_credential(&auth, &"env_a".into(), Role::Workbench)
        .await
        .expect("issued");
    assert!(issued.key.secret_hash.verify(&issued.client_secret));
    assert!(matches!(
        svc.create_credential(&auth, &"env_a".into(), Role::Auth)
            .await,
        Err(DomainError::Validation(_))
    ));
    // Least privilege: the `auth` role alone, or `credentials:write` alone, holds none of
    // what an `events` key can do; `credentials:write` with `webhooks:*` is still not
    // `workbench`.
    let only_auth = Principal {
        access: KeyAccess::Roles(vec![Role::Auth]),
        ..auth.clone()
    };
    let narrow = Principal {
        access: KeyAccess::Scopes(vec![
            Scope::CredentialsWrite,
            Scope::WebhooksRead,
            Scope::WebhooksWrite,
        ]),
        ..auth.clone()
    };
    for (who, role) in [
        (&only_auth, Role::Events),
        (&only_auth, Role::Workbench),
        (&narrow, Role::Workbench),
    ] {
        match svc.create_credential(who, &"env_a".into(), role).await {
            Err(DomainError::Forbidden(why)) => assert!(why.contains("holds itself"), "{why}"),
            other => panic!("{role}: {other:?}"),
        }
    }
    match svc
        .create_credential(&narrow, &"env_a".into(), Role::Workbench)
        .await
    {
        Err(DomainError::Forbidden(why)) => assert!(
            why.contains("`notification_platforms:read`") && !why.contains("`webhooks:read`"),
            "names only what it lacks: {why}"
        ),
        other => panic!("{other:?}"),
    }
    let events = Principal {
        access: KeyAccess::Roles(vec![Role::Events]),
        ..auth
    };
    assert!(matches!(
        svc.create_credential(&events, &"env_a".into(), Role::Events)
            .await,
        Err(DomainError::Forbidden(_))
    ));
}

#[tokio::test]
async fn revoke_only_reaches_keys_of_the_same_organisation_and_environment() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key().with(eq("key_mine")).returning(|_| {
        Ok(Some(ApiKey {
            id: "key_mine".into(),
            ..key(
                "s",
                KeyAccess::Roles(vec![Role::Events]),
                EnvironmentGrant::Only(vec!["env_a".into()]),
            )
        }))
    });
    repo.expect_find_key()
        .with(eq("key_other_env"))
        .returning(|_| {
            Ok(Some(key(
                "s",
                KeyAccess::Roles(vec![Role::Events]),
                EnvironmentGrant::Only(vec!["env_b".into()]),
            )))
        });
    repo.expect_find_key()
        .with(eq("key_other_org"))
        .returning(|_| {
            Ok(Some(ApiKey {
                organisation_id: "org_2".into(),
                ..key(
                    "s",
                    KeyAccess::Roles(vec![Role::Events]),
                    EnvironmentGrant::All,
                )
            }))
        });
    repo.expect_find_key().with(eq("key_admin")).returning(|_| {
        Ok(Some(key(
            "s",
            KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
            EnvironmentGrant::Only(vec!["env_a".into(), "env_b".into()]),
        )))
    });
    repo.expect_revoke_key()
        .with(eq("key_mine"), eq(t0()))
        .times(1)
        .returning(|_, _| Ok(true));
    let svc = AuthService::new(Arc::new(repo), clock());
    let auth = Principal {
        key_id: "key_admin".into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
        environment_ids: vec!["env_a".into(), "env_b".into()],
        end_user: None,
    };
    svc.revoke_credential(&auth, &"env_a".into(), &"key_mine".into())
        .await
        .expect("revoked");
    for other in ["key_other_env", "key_other_org"] {
        assert!(matches!(
            svc.revoke_credential(&auth, &"env_a".into(), &KeyId::from(other))
                .await,
            Err(DomainError::NotFound(Resource::Credential))
        ));
    }
}

#[tokio::test]
async fn revocation_reaches_only_keys_whose_environments_lie_within_the_callers() {
    let grant = |id: &str| match id {
        "key_all" | "key_admin_all" => EnvironmentGrant::All,
        "key_ab" => EnvironmentGrant::Only(vec!["env_a".into(), "env_b".into()]),
        _ => EnvironmentGrant::Only(vec!["env_a".into()]),
    };
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key().returning(move |id| {
        Ok(Some(ApiKey {
            id: id.to_owned().into(),
            ..key(
                "s",
                KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
                grant(id),
            )
        }))
    });
    repo.expect_revoke_key().returning(|_, _| Ok(true));
    let svc = AuthService::new(Arc::new(repo), clock());
    let caller = |id: &str, envs: &[&str]| Principal {
        key_id: id.into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
        environment_ids: envs.iter().map(|e| (*e).to_owned()).collect(),
        end_user: None,
    };
    let only_a = caller("key_admin_a", &["env_a"]);
    for beyond in ["key_all", "key_ab"] {
        let refused = svc
            .revoke_credential(&only_a, &"env_a".into(), &KeyId::from(beyond))
            .await;
        assert!(
            matches!(refused, Err(DomainError::Forbidden(_))),
            "{beyond}: {refused:?}"
        );
    }
    svc.revoke_credential(&only_a, &"env_a".into(), &"key_a".into())
        .await
        .expect("within its own");
    let everywhere = caller("key_admin_all", &["env_a", "env_b"]);
    for any in ["key_all", "key_ab", "key_a"] {
        svc.revoke_credential(&everywhere, &"env_a".into(), &KeyId::from(any))
            .await
            .expect("a key of every environment reaches all");
    }
}

#[tokio::test]
async fn admin_key_creation_validates_roles_scopes_and_environments_together() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_organisation_by_name().returning(|_| {
        Ok(Some(Organisation {
            id: "org_1".into(),
            name: "default".into(),
            created: t0(),
        }))
    });
    repo.expect_list_environments()
        .returning(|_| Ok(vec![env("env_a")]));
    repo.expect_insert_key().never();
    let svc = AuthService::new(Arc::new(repo), clock());
    let err = svc
        .create_key(
            None,
            vec![Role::Events],
            vec![Scope::UsersRead],
            EnvironmentGrant::Only(vec!["env_zz".into()]),
        )
        .await
        .expect_err("invalid");
    match err {
        DomainError::Validation(errors) => assert_eq!(errors.len(), 2, "{errors:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bootstrap_creates_a_full_scope_key_only_on_an_empty_database() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_bootstrap_if_empty()
        .withf(|org, env, key| {
            org.name == "default"
                && env.name == "development"
                && env.organisation_id == org.id
                && key.access == KeyAccess::Scopes(Scope::ALL.to_vec())
                && key.environments == EnvironmentGrant::All
        })
        .times(1)
        .returning(|_, _, _| Ok(true));
    let svc = AuthService::new(Arc::new(repo), clock());
    let boot = svc.bootstrap().await.expect("ok").expect("created");
    assert!(boot.key.key.secret_hash.verify(&boot.key.client_secret));

    let mut repo = MockTenancyRepository::new();

    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_bootstrap_if_empty()
        .returning(|_, _, _| Ok(false));
    assert!(AuthService::new(Arc::new(repo), clock())
        .bootstrap()
        .await
        .expect("ok")
        .is_none());
}

/// A clock the test moves.
fn moving_clock(at: Arc<std::sync::Mutex<Timestamp>>) -> Arc<MockClock> {
    let mut clock = MockClock::new();
    clock
        .expect_now()
        .returning(move || *at.lock().expect("clock"));
    Arc::new(clock)
}

#[tokio::test]
async fn a_caller_is_reused_for_a_second_then_read_again() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    // Two reads in all: the first call and the one after the second has passed.
    repo.expect_find_key_by_secret_hash()
        .times(2)
        .returning(|_| {
            Ok(Some(key(
                "wbs_secret",
                KeyAccess::Roles(vec![Role::Events]),
                EnvironmentGrant::Only(vec!["env_a".into()]),
            )))
        });
    let now = Arc::new(std::sync::Mutex::new(t0()));
    let svc = AuthService::new(Arc::new(repo), moving_clock(now.clone()));
    for _ in 0..5 {
        let p = svc
            .authenticate_for("wbs_secret", Some("env_a"))
            .await
            .expect("authenticated");
        assert_eq!(p.environment_ids, ["env_a"]);
    }
    *now.lock().expect("clock") = t0() + Duration::milliseconds(999);
    svc.authenticate("wbs_secret")
        .await
        .expect("still remembered");
    *now.lock().expect("clock") = t0() + Duration::milliseconds(1_000);
    svc.authenticate("wbs_secret").await.expect("read again");
}

#[tokio::test]
async fn a_caller_without_the_requested_environment_is_read_again_and_gains_it() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_key_by_secret_hash().returning(|_| {
        Ok(Some(key(
            "wbs_secret",
            KeyAccess::Roles(vec![Role::Events]),
            EnvironmentGrant::All,
        )))
    });
    // The organisation gains env_b (created by another process) between the two calls.
    let mut listed = 0;
    repo.expect_list_environments()
        .times(2)
        .returning(move |_| {
            listed += 1;
            Ok(if listed == 1 {
                vec![env("env_a")]
            } else {
                vec![env("env_a"), env("env_b")]
            })
        });
    let svc = AuthService::new(Arc::new(repo), clock());
    svc.authenticate_for("wbs_secret", Some("env_a"))
        .await
        .expect("a");
    let p = svc
        .authenticate_for("wbs_secret", Some("env_b"))
        .await
        .expect("b");
    assert_eq!(p.environment_ids, ["env_a", "env_b"]);
    // Remembered with it now: no third read.
    svc.authenticate_for("wbs_secret", Some("env_b"))
        .await
        .expect("b again");
}

#[tokio::test]
async fn a_revocation_through_this_process_takes_effect_at_once() {
    let revoked = Arc::new(std::sync::Mutex::new(None));
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    let state = revoked.clone();
    repo.expect_find_key_by_secret_hash().returning(move |_| {
        Ok(Some(ApiKey {
            revoked: *state.lock().expect("state"),
            ..key(
                "wbs_secret",
                KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
                EnvironmentGrant::Only(vec!["env_a".into()]),
            )
        }))
    });
    repo.expect_find_key().returning(|_| {
        Ok(Some(key(
            "wbs_secret",
            KeyAccess::Scopes(vec![Scope::CredentialsWrite]),
            EnvironmentGrant::Only(vec!["env_a".into()]),
        )))
    });
    let state = revoked.clone();
    repo.expect_revoke_key().returning(move |_, at| {
        *state.lock().expect("state") = Some(at);
        Ok(true)
    });
    let svc = AuthService::new(Arc::new(repo), clock());
    let caller = svc.authenticate("wbs_secret").await.expect("live");
    svc.revoke_credential(&caller, &"env_a".into(), &"key_1".into())
        .await
        .expect("revoked");
    assert!(matches!(
        svc.authenticate("wbs_secret").await,
        Err(DomainError::Unauthenticated)
    ));
}

#[tokio::test]
async fn a_token_is_not_remembered_past_its_expiry() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_mark_key_used().returning(|_, _| Ok(()));
    repo.expect_find_access_token().returning(|_| {
        Ok(Some(AccessTokenGrant {
            token_hash: SecretHash::of("wbt_short"),
            key_id: "key_1".into(),
            created: t0(),
            expires: t0() + Duration::milliseconds(300),
        }))
    });
    repo.expect_find_key().returning(|_| {
        Ok(Some(key(
            "wbs_x",
            KeyAccess::Roles(vec![Role::Events]),
            EnvironmentGrant::Only(vec!["env_a".into()]),
        )))
    });
    let now = Arc::new(std::sync::Mutex::new(t0()));
    let svc = AuthService::new(Arc::new(repo), moving_clock(now.clone()));
    svc.authenticate("wbt_short").await.expect("live");
    *now.lock().expect("clock") = t0() + Duration::milliseconds(300);
    assert!(matches!(
        svc.authenticate("wbt_short").await,
        Err(DomainError::Unauthenticated)
    ));
}

#[tokio::test]
async fn a_keys_use_is_recorded_once_a_minute_and_a_failure_to_record_refuses_no_one() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_find_key_by_secret_hash().returning(|_| {
        Ok(Some(key(
            "wbs_secret",
            KeyAccess::Roles(vec![Role::Events]),
            EnvironmentGrant::Only(vec!["env_a".into()]),
        )))
    });
    // Recorded at 0 s and at 61 s; the reads at 2 s and 30 s record nothing. The store fails
    // the second time: the caller is let in all the same.
    let mut calls = 0;
    repo.expect_mark_key_used()
        .with(eq("key_1"), mockall::predicate::always())
        .times(2)
        .returning(move |_, _| {
            calls += 1;
            if calls == 2 {
                Err(StorageError::Unavailable("down".into()))
            } else {
                Ok(())
            }
        });
    let at = Arc::new(std::sync::Mutex::new(t0()));
    let auth = AuthService::new(Arc::new(repo), moving_clock(at.clone()));
    for seconds in [0, 2, 30, 61] {
        *at.lock().expect("clock") = t0() + Duration::seconds(seconds);
        auth.authenticate("wbs_secret")
            .await
            .expect("authenticated");
    }
}

#[tokio::test]
async fn keys_are_listed_only_for_a_caller_that_may_read_credentials() {
    let mut repo = MockTenancyRepository::new();
    repo.expect_list_keys()
        .withf(|org, env, page| {
            org.as_deref() == Some("org_1") && env.as_deref() == Some("env_a") && page.limit == 1
        })
        .returning(|_, _, _| {
            let summary = |id: &str| KeySummary {
                key: ApiKey {
                    id: id.into(),
                    ..key(
                        "wbs_x",
                        KeyAccess::Roles(vec![Role::Events]),
                        EnvironmentGrant::All,
                    )
                },
                last_used: None,
            };
            Ok(vec![summary("key_a"), summary("key_b")])
        });
    let auth = AuthService::new(Arc::new(repo), clock());
    let reader = Principal {
        key_id: "key_r".into(),
        organisation_id: "org_1".into(),
        access: KeyAccess::Scopes(vec![Scope::CredentialsRead]),
        environment_ids: vec!["env_a".into()],
        end_user: None,
    };
    let page = auth
        .list_credentials(
            &reader,
            &"env_a".into(),
            PageRequest::new(Some(1), None).expect("page"),
        )
        .await
        .expect("listed");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next_after.as_deref(), Some("key_a"));
    let events = Principal {
        access: KeyAccess::Roles(vec![Role::Events]),
        ..reader.clone()
    };
    assert!(matches!(
        auth.list_credentials(&events, &"env_a".into(), PageRequest::default())
            .await,
        Err(DomainError::Forbidden(_))
    ));
    assert!(matches!(
        auth.list_credentials(&reader, &"env_b".into(), PageRequest::default())
            .await,
        Err(DomainError::Unauthenticated)
    ));
}

#[test]
fn every_scope_grants_the_permission_that_names_it() {
    for scope in Scope::ALL {
        assert_eq!(Permission::granted_by(scope).scope(), scope);
    }
}
