//! The Audience API over its stores ([`AudienceService`]): end users, segments and streams.

use std::sync::Arc;

use serde_json::Value;

use super::{
    validate_user, EndUser, EndUserRepository, Filter, Segment, SegmentRepository, Stream,
    StreamRepository, UserInput, UserQuery, MAX_BATCH_USERS, NAME_MAX_CHARS,
};
use crate::id::{new_id, EndUserId, EnvironmentId, IdKind, SegmentId, StreamId};
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError};

/// Users read per batch when a list has to evaluate a segment's filter.
const SCAN_BATCH: u32 = 1_000;

fn validate_name(errors: &mut Vec<FieldError>, field: &str, name: &str) {
    errors.extend(crate::name::check(field, name, NAME_MAX_CHARS));
}

/// The Audience API: end users, segments and streams of an environment.
///
/// Every method first checks that the caller may use the environment
/// ([`DomainError::Unauthenticated`] otherwise) and holds `users:read` or `users:write` there
/// ([`DomainError::Forbidden`]); storage failures come back as [`DomainError::Storage`].
///
/// ```
/// use std::sync::{Arc, Mutex};
///
/// use workbench_domain::audience::{AudienceService, EndUser, UserInput};
/// use workbench_domain::mocks::{
///     MockClock, MockEndUserRepository, MockSegmentRepository, MockStreamRepository,
/// };
/// use workbench_domain::{DomainError, Principal};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let mut clock = MockClock::new();
/// clock.expect_now().return_const(workbench_domain::chrono::Utc::now());
/// // A repository that keeps what it is given.
/// let stored: Arc<Mutex<Vec<EndUser>>> = Arc::default();
/// let mut users = MockEndUserRepository::new();
/// let kept = stored.clone();
/// users.expect_upsert().times(1).returning(move |batch| {
///     kept.lock().unwrap().extend(batch);
///     Ok(())
/// });
/// users.expect_get().returning(move |env, id| {
///     let all = stored.lock().unwrap();
///     Ok(all.iter().find(|u| u.environment_id == env && u.id == id).cloned())
/// });
/// let audience = AudienceService::new(
///     Arc::new(users),
///     Arc::new(MockSegmentRepository::new()),
///     Arc::new(MockStreamRepository::new()),
///     Arc::new(clock),
/// );
/// let who = Principal::trusted("crm-sync", "org_1", &["env_1"]);
///
/// let input = UserInput {
///     id: "u1".into(),
///     tags: vec!["vip".into(), "beta".into(), "vip".into()],
///     ..UserInput::default()
/// };
/// let user = audience.put_user(&who, &"env_1".into(), input).await?;
/// assert_eq!(user.tags, ["beta", "vip"]); // sorted, without duplicates
/// assert!(!user.test_user);
///
/// // Every problem at once, each at its field; nothing is stored (`upsert` ran once).
/// let bad = UserInput { id: String::new(), tags: vec![String::new()], ..UserInput::default() };
/// let Err(DomainError::Validation(problems)) = audience.put_user(&who, &"env_1".into(), bad).await
/// else {
///     panic!("the input is invalid")
/// };
/// let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
/// assert_eq!(fields, ["id", "tags[0]"]);
///
/// // An environment the caller may not use.
/// let other = audience.get_user(&who, &"env_2".into(), &"u1".into()).await;
/// assert!(matches!(other, Err(DomainError::Unauthenticated)));
/// # Ok::<(), DomainError>(())
/// # }).unwrap();
/// ```
pub struct AudienceService {
    users: Arc<dyn EndUserRepository>,
    segments: Arc<dyn SegmentRepository>,
    streams: Arc<dyn StreamRepository>,
    clock: Arc<dyn Clock>,
}

impl AudienceService {
    /// A service over these repositories; `clock` stamps `created` and `updated`.
    pub fn new(
        users: Arc<dyn EndUserRepository>,
        segments: Arc<dyn SegmentRepository>,
        streams: Arc<dyn StreamRepository>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            users,
            segments,
            streams,
            clock,
        }
    }

    fn stamp(&self, env: &str, input: UserInput) -> EndUser {
        let now = self.clock.now();
        EndUser {
            environment_id: env.to_owned(),
            id: input.id.into(),
            test_user: input.test_user,
            tags: input.tags,
            attributes: input.attributes,
            created: now,
            updated: now,
        }
    }

    /// Creates or replaces a user.
    ///
    /// The user is replaced whole (omitted fields take their defaults) and keeps its
    /// `created`; the answer is the user as stored, read back. Needs `users:write`. Every
    /// problem of the input comes back at once as [`DomainError::Validation`]
    /// ([`validate_user`]); [`DomainError::NotFound`] only if the user was deleted between the
    /// write and the read.
    pub async fn put_user(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        input: UserInput,
    ) -> Result<EndUser, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let mut errors = Vec::new();
        let input = validate_user(&mut errors, "", input);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let id = input.id.clone();
        self.users.upsert(vec![self.stamp(env, input)]).await?;
        // Read back: an existing user keeps its `created`.
        self.users
            .get(env, &id)
            .await?
            .ok_or(DomainError::NotFound(Resource::EndUser))
    }

    /// Creates or replaces up to 10,000 users in one transaction; all or nothing.
    ///
    /// Answers how many users were stored. Needs `users:write`. [`DomainError::Validation`]
    /// with a problem at `users` for an empty batch or one over [`MAX_BATCH_USERS`]; otherwise
    /// with every problem of every user at `users[i].<field>`, including an id repeated in the
    /// batch. With any problem nothing is stored.
    pub async fn put_users(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        inputs: Vec<UserInput>,
    ) -> Result<usize, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if inputs.is_empty() || inputs.len() > MAX_BATCH_USERS {
            return Err(DomainError::invalid(
                "users",
                format!("send 1 to {MAX_BATCH_USERS} users"),
            ));
        }
        let mut errors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut users = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.into_iter().enumerate() {
            let input = validate_user(&mut errors, &format!("users[{i}]"), input);
            if !seen.insert(input.id.clone()) {
                errors.push(FieldError::new(
                    format!("users[{i}].id"),
                    format!("`{}` appears twice in the batch", input.id),
                ));
            }
            users.push(self.stamp(env, input));
        }
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        let count = users.len();
        self.users.upsert(users).await?;
        Ok(count)
    }

    /// The user with this id. Needs `users:read`; [`DomainError::NotFound`] when the
    /// environment has no such user.
    pub async fn get_user(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &EndUserId,
    ) -> Result<EndUser, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        self.users
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::EndUser))
    }

    /// Deletes the user and its tags. Needs `users:write`; [`DomainError::NotFound`] when the
    /// environment has no such user.
    pub async fn delete_user(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &EndUserId,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if self.users.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::EndUser))
        }
    }

    /// Users by id. With a segment, its filter is evaluated on the users read (in batches)
    /// until the page is full.
    ///
    /// `query` narrows the users read (tag, test flag) and `page` is the page asked for; the
    /// answer's `next_after` is set when more users follow. Needs `users:read`. A
    /// `segment_id` that is not a segment of the environment is a [`DomainError::Validation`]
    /// at `segmentId`. With a segment, a page may take several reads of 1,000 users.
    pub async fn list_users(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        query: UserQuery,
        segment_id: Option<String>,
        page: PageRequest,
    ) -> Result<Page<EndUser>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        let Some(segment_id) = segment_id else {
            let users = self.users.list(env, &query, &page).await?;
            return Ok(Page::from_overfetch(users, page.limit, |u| {
                u.id.clone().into()
            }));
        };
        let segment = self.segments.get(env, &segment_id).await?.ok_or_else(|| {
            DomainError::invalid(
                "segmentId",
                format!("`{segment_id}` is not a segment of this environment"),
            )
        })?;
        let mut found = Vec::new();
        let mut after = page.after.clone();
        loop {
            let batch = self
                .users
                .list(
                    env,
                    &query,
                    &PageRequest {
                        limit: SCAN_BATCH,
                        after: after.clone(),
                    },
                )
                .await?;
            let more = batch.len() > SCAN_BATCH as usize;
            for user in batch.into_iter().take(SCAN_BATCH as usize) {
                after = Some(user.id.clone().into());
                if segment.filter.matches(&user) {
                    found.push(user);
                    if found.len() > page.limit as usize {
                        return Ok(Page::from_overfetch(found, page.limit, |u| {
                            u.id.clone().into()
                        }));
                    }
                }
            }
            if !more {
                return Ok(Page::from_overfetch(found, page.limit, |u| {
                    u.id.clone().into()
                }));
            }
        }
    }

    /// Creates a segment from a name and a filter document (see
    /// [`filter`](super::filter)). Needs `users:write`. The problems of the name (at `name`)
    /// and of the filter (at `filter...`) come back together as
    /// [`DomainError::Validation`]. The answer is the segment stored.
    pub async fn create_segment(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        name: String,
        filter: Value,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let (name, filter) = validate_segment(name, &filter)?;
        let now = self.clock.now();
        let segment = Segment {
            id: new_id(IdKind::Segment).into(),
            environment_id: env.as_str().to_owned(),
            name,
            filter,
            created: now,
            updated: now,
        };
        self.segments.insert(&segment).await?;
        Ok(segment)
    }

    /// The segment with this id. Needs `users:read`; [`DomainError::NotFound`] when the
    /// environment has no such segment.
    pub async fn get_segment(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SegmentId,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        self.segments
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Segment))
    }

    /// Every segment of the environment, by name. Needs `users:read`.
    pub async fn list_segments(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<Segment>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        Ok(self.segments.list(env).await?)
    }

    /// Replaces a segment's name and filter; its id and `created` stay. Needs `users:write`.
    /// [`DomainError::NotFound`] when the environment has no such segment (checked before the
    /// name and filter); then [`DomainError::Validation`] as for
    /// [`create_segment`](Self::create_segment). The answer is the segment as saved.
    pub async fn update_segment(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SegmentId,
        name: String,
        filter: Value,
    ) -> Result<Segment, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let current = self
            .segments
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Segment))?;
        let (name, filter) = validate_segment(name, &filter)?;
        let segment = Segment {
            name,
            filter,
            updated: self.clock.now(),
            ..current
        };
        if self.segments.update(&segment).await? {
            Ok(segment)
        } else {
            Err(DomainError::NotFound(Resource::Segment))
        }
    }

    /// Deletes a segment. Needs `users:write`; [`DomainError::NotFound`] when the
    /// environment has no such segment.
    pub async fn delete_segment(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &SegmentId,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        if self.segments.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::Segment))
        }
    }

    fn default_stream(&self, env: &str) -> Stream {
        Stream::default_for(env, self.clock.now())
    }

    /// The environment's streams, `All cards` first (created on this first use when
    /// missing), then the others oldest first. Needs `users:read`.
    pub async fn list_streams(
        &self,
        who: &Principal,
        env: &EnvironmentId,
    ) -> Result<Vec<Stream>, DomainError> {
        who.authorize(env, Permission::UsersRead)?;
        Ok(self.streams.list(env, self.default_stream(env)).await?)
    }

    /// Creates a stream. Needs `users:write`. [`DomainError::Validation`] at `name` for a
    /// blank name, one over [`NAME_MAX_CHARS`] characters or one with control characters; a
    /// [`DomainError::Conflict`] of kind [`ConflictKind::StreamNameTaken`] when another stream
    /// of the environment has the name (`All cards` included: the default stream is created
    /// first). The answer is the stream stored.
    pub async fn create_stream(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        name: String,
    ) -> Result<Stream, DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let mut errors = Vec::new();
        validate_name(&mut errors, "name", &name);
        if !errors.is_empty() {
            return Err(DomainError::Validation(errors));
        }
        // The default stream exists before any other, so its name is taken from the start.
        self.streams.list(env, self.default_stream(env)).await?;
        let stream = Stream {
            id: new_id(IdKind::Stream).into(),
            environment_id: env.as_str().to_owned(),
            name,
            is_default: false,
            created: self.clock.now(),
        };
        match self.streams.insert(&stream).await {
            Ok(()) => Ok(stream),
            Err(StorageError::UniqueViolation(_)) => Err(DomainError::conflict(
                ConflictKind::StreamNameTaken,
                format!("a stream named `{}` already exists", stream.name),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a stream. Needs `users:write`. [`DomainError::NotFound`] when the environment
    /// has no such stream; a [`DomainError::Conflict`] of kind [`ConflictKind::DefaultStream`]
    /// for `All cards`.
    pub async fn delete_stream(
        &self,
        who: &Principal,
        env: &EnvironmentId,
        id: &StreamId,
    ) -> Result<(), DomainError> {
        who.authorize(env, Permission::UsersWrite)?;
        let stream = self
            .streams
            .get(env, id)
            .await?
            .ok_or(DomainError::NotFound(Resource::Stream))?;
        if stream.is_default {
            return Err(DomainError::conflict(
                ConflictKind::DefaultStream,
                "the `All cards` stream cannot be deleted",
            ));
        }
        if self.streams.delete(env, id).await? {
            Ok(())
        } else {
            Err(DomainError::NotFound(Resource::Stream))
        }
    }
}

fn validate_segment(name: String, filter: &Value) -> Result<(String, Filter), DomainError> {
    let mut errors = Vec::new();
    validate_name(&mut errors, "name", &name);
    match Filter::parse(filter, "filter") {
        Ok(filter) if errors.is_empty() => Ok((name, filter)),
        Ok(_) => Err(DomainError::Validation(errors)),
        Err(mut e) => {
            errors.append(&mut e);
            Err(DomainError::Validation(errors))
        }
    }
}
