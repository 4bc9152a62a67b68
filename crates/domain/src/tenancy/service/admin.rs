//! The admin operations of [`AuthService`]: the default organisation, environments and keys
//! an operator creates, lists and revokes, and the first start on an empty database.

use super::AuthService;
use crate::id::{new_id, IdKind};
use crate::tenancy::{
    Bootstrap, Environment, EnvironmentGrant, IssuedKey, KeyAccess, KeySummary, Organisation, Role,
    Scope, BOOTSTRAP_ENVIRONMENT, DEFAULT_ORGANISATION, NAME_MAX_CHARS,
};
use crate::{ConflictKind, DomainError, FieldError, Page, PageRequest, Resource, StorageError};

impl AuthService {
    /// Admin: the environments of the organisation, oldest first.
    pub async fn list_environments_of(
        &self,
        organisation_id: &str,
    ) -> Result<Vec<Environment>, DomainError> {
        Ok(self.repo.list_environments(organisation_id).await?)
    }

    /// Admin: every key (of every organisation), or those that may use `environment_id`,
    /// revoked ones included, by client id.
    pub async fn list_keys(
        &self,
        environment_id: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<KeySummary>, DomainError> {
        let keys = self
            .repo
            .list_keys(None, environment_id.map(str::to_owned), &page)
            .await?;
        Ok(Page::from_overfetch(keys, page.limit, |k| {
            k.key.id.clone().into()
        }))
    }

    /// Admin: revokes the key and its access tokens; [`DomainError::NotFound`] for an unknown
    /// client id. Callers this service remembers are forgotten.
    pub async fn revoke_key(&self, client_id: &str) -> Result<(), DomainError> {
        if !self.repo.revoke_key(client_id, self.clock.now()).await? {
            return Err(DomainError::NotFound(Resource::Credential));
        }
        self.forget_all();
        Ok(())
    }

    /// Admin: the organisation named `default`, created when missing.
    pub async fn default_organisation(&self) -> Result<Organisation, DomainError> {
        if let Some(org) = self
            .repo
            .find_organisation_by_name(DEFAULT_ORGANISATION)
            .await?
        {
            return Ok(org);
        }
        let org = Organisation {
            id: new_id(IdKind::Organisation).into(),
            name: DEFAULT_ORGANISATION.to_owned(),
            created: self.clock.now(),
        };
        match self.repo.insert_organisation(&org).await {
            Ok(()) => Ok(org),
            // Another process created it between our read and our insert.
            Err(StorageError::UniqueViolation(_)) => self
                .repo
                .find_organisation_by_name(DEFAULT_ORGANISATION)
                .await?
                .ok_or_else(|| {
                    StorageError::Internal("default organisation vanished".into()).into()
                }),
            Err(e) => Err(e.into()),
        }
    }

    /// Admin: a new environment in the default organisation. A blank name, one over
    /// [`NAME_MAX_CHARS`] or with control characters is a [`DomainError::Validation`] on
    /// `name`; a name the organisation already has is a [`ConflictKind::EnvironmentNameTaken`]
    /// conflict.
    pub async fn create_environment(&self, name: &str) -> Result<Environment, DomainError> {
        validate_name("name", name)?;
        let org = self.default_organisation().await?;
        let env = Environment {
            id: new_id(IdKind::Environment).into(),
            organisation_id: org.id.into(),
            name: name.to_owned(),
            created: self.clock.now(),
        };
        match self.repo.insert_environment(&env).await {
            Ok(()) => Ok(env),
            Err(StorageError::UniqueViolation(_)) => Err(DomainError::conflict(
                ConflictKind::EnvironmentNameTaken,
                format!("an environment named `{name}` already exists"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Admin: a key of the default organisation. `environments` must name environments of that
    /// organisation. Exactly one of roles or scopes must be given. Every problem is reported in
    /// one [`DomainError::Validation`] (fields `roles`, `name`, `environments`); duplicate
    /// roles, scopes and environments are dropped.
    pub async fn create_key(
        &self,
        name: Option<String>,
        roles: Vec<Role>,
        scopes: Vec<Scope>,
        environments: EnvironmentGrant,
    ) -> Result<IssuedKey, DomainError> {
        let mut errors = Vec::new();
        let access = match (roles.is_empty(), scopes.is_empty()) {
            (false, true) => Some(KeyAccess::Roles(dedup(roles))),
            (true, false) => Some(KeyAccess::Scopes(dedup(scopes))),
            (false, false) => {
                errors.push(FieldError::new(
                    "roles",
                    "a key holds roles or scopes, not both",
                ));
                None
            }
            (true, true) => {
                errors.push(FieldError::new(
                    "roles",
                    "give at least one role or one scope",
                ));
                None
            }
        };
        if let Some(name) = &name {
            if let Err(DomainError::Validation(mut e)) = validate_name("name", name) {
                errors.append(&mut e);
            }
        }
        let org = self.default_organisation().await?;
        if let EnvironmentGrant::Only(ids) = &environments {
            let known = self.repo.list_environments(&org.id).await?;
            if ids.is_empty() {
                errors.push(FieldError::new(
                    "environments",
                    "grant at least one environment",
                ));
            }
            for id in ids {
                if !known.iter().any(|e| &e.id == id) {
                    errors.push(FieldError::new(
                        "environments",
                        format!("unknown environment `{id}`"),
                    ));
                }
            }
        }
        match access {
            Some(access) if errors.is_empty() => {
                self.issue_key(&org.id, name, access, dedup_grant(environments))
                    .await
            }
            _ => Err(DomainError::Validation(errors)),
        }
    }

    /// First start on an empty database: the `default` organisation, a `development`
    /// environment and a key holding every scope on every environment of the organisation.
    /// Returns `None` when the database already had an organisation.
    pub async fn bootstrap(&self) -> Result<Option<Bootstrap>, DomainError> {
        let now = self.clock.now();
        let organisation = Organisation {
            id: new_id(IdKind::Organisation).into(),
            name: DEFAULT_ORGANISATION.to_owned(),
            created: now,
        };
        let environment = Environment {
            id: new_id(IdKind::Environment).into(),
            organisation_id: organisation.id.clone().into(),
            name: BOOTSTRAP_ENVIRONMENT.to_owned(),
            created: now,
        };
        let (key, client_secret) = self.new_key(
            &organisation.id,
            Some("bootstrap".to_owned()),
            KeyAccess::Scopes(Scope::ALL.to_vec()),
            EnvironmentGrant::All,
        );
        let created = match self
            .repo
            .bootstrap_if_empty(&organisation, &environment, &key)
            .await
        {
            Ok(created) => created,
            // Another process bootstrapped the same database at the same moment.
            Err(StorageError::UniqueViolation(_)) => false,
            Err(e) => return Err(e.into()),
        };
        Ok(created.then(|| Bootstrap {
            key: IssuedKey {
                key,
                client_secret,
                environment_ids: vec![environment.id.clone().into()],
            },
            organisation,
            environment,
        }))
    }
}

fn dedup<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

fn dedup_grant(grant: EnvironmentGrant) -> EnvironmentGrant {
    match grant {
        EnvironmentGrant::All => EnvironmentGrant::All,
        EnvironmentGrant::Only(ids) => EnvironmentGrant::Only(dedup(ids)),
    }
}

fn validate_name(field: &str, name: &str) -> Result<(), DomainError> {
    match crate::name::problem(name, NAME_MAX_CHARS) {
        Some(message) => Err(DomainError::invalid(field, message)),
        None => Ok(()),
    }
}
