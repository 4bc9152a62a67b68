//! The audience flows target: end users with tags and attributes, segments (saved, dynamic
//! filters), and streams (every environment has the undeletable `All cards`). The rules are in
//! docs/api.md, Audience.

pub mod filter;
pub mod test_users;

use crate::id::{EndUserId, EnvironmentId, SegmentId, StreamId};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::id::{new_id, IdKind};
use crate::page::{Page, PageRequest};
use crate::tenancy::{Permission, Principal};
use crate::{Clock, ConflictKind, DomainError, FieldError, Resource, StorageError, Timestamp};
pub use filter::Filter;

/// The longest end-user id, in characters (Unicode scalar values).
pub const USER_ID_MAX_CHARS: usize = 255;
/// The most tags one user may have (counted as sent, before duplicates are dropped).
pub const MAX_TAGS_PER_USER: usize = 100;
/// The longest tag, in characters.
pub const TAG_MAX_CHARS: usize = 100;
/// The most attributes one user may have.
pub const MAX_ATTRIBUTES_PER_USER: usize = 100;
/// The longest attribute name, in characters.
pub const ATTRIBUTE_NAME_MAX_CHARS: usize = 100;
/// The longest string attribute value, in characters.
pub const ATTRIBUTE_VALUE_MAX_CHARS: usize = 2_000;
/// The most users one [`AudienceService::put_users`] batch may hold.
pub const MAX_BATCH_USERS: usize = 10_000;
/// The longest segment or stream name, in characters.
pub const NAME_MAX_CHARS: usize = 255;
/// The stream every card is in.
pub const DEFAULT_STREAM_NAME: &str = "All cards";
/// Users read per batch when a list has to evaluate a segment's filter.
const SCAN_BATCH: u32 = 1_000;

/// An end user: the caller's own id, a test flag, tags, attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct EndUser {
    /// The environment the user belongs to; the same id in another environment is another user.
    pub environment_id: String,
    /// The caller's own id for the user: 1 to [`USER_ID_MAX_CHARS`] characters, no control
    /// characters.
    pub id: EndUserId,
    /// A test user: test-mode triggers (`/test`) reach test users only.
    pub test_user: bool,
    /// Sorted, without duplicates.
    pub tags: Vec<String>,
    /// Scalar values only (string, number, boolean).
    pub attributes: Map<String, Value>,
    /// When the user was first stored; a later put keeps it.
    pub created: Timestamp,
    /// When the user was last put.
    pub updated: Timestamp,
}

/// What a PUT sends: the whole user (omitted fields take their defaults).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInput {
    /// The user's id (the path's `endUserId`, or `id` in a batch).
    pub id: String,
    /// `testUser`; false when omitted.
    pub test_user: bool,
    /// `tags`, in any order and possibly repeated: [`validate_user`] sorts and deduplicates
    /// them.
    pub tags: Vec<String>,
    /// `attributes`: at most [`MAX_ATTRIBUTES_PER_USER`], each a string, a number or a boolean.
    pub attributes: Map<String, Value>,
}

/// A segment: a named, saved filter. It is dynamic: its users are those its filter matches
/// when it is used (a list, a `segment` trigger target), not a list kept when it was saved.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// `seg_…`.
    pub id: SegmentId,
    /// The environment the segment belongs to.
    pub environment_id: String,
    /// 1 to [`NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name). Not unique.
    pub name: String,
    /// The validated filter, which keeps the document as sent in [`Filter::source`].
    pub filter: Filter,
    /// When the segment was created.
    pub created: Timestamp,
    /// When its name or filter was last replaced.
    pub updated: Timestamp,
}

/// A stream: a named part of a user's feed that cards can be sent to (`targetStreamIds`).
/// Every card is in the default stream, `All cards`, too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    /// `str_…`.
    pub id: StreamId,
    /// The environment the stream belongs to.
    pub environment_id: String,
    /// 1 to [`NAME_MAX_CHARS`] characters, by the rule of [`name`](crate::name); unique within
    /// the environment.
    pub name: String,
    /// `All cards`: exists in every environment, cannot be deleted.
    pub is_default: bool,
    /// When the stream was created.
    pub created: Timestamp,
}

impl Stream {
    /// A new `All cards` stream for the environment (stored only when the environment has none).
    pub fn default_for(environment_id: &str, created: Timestamp) -> Stream {
        Stream {
            id: new_id(IdKind::Stream).into(),
            environment_id: environment_id.to_owned(),
            name: DEFAULT_STREAM_NAME.to_owned(),
            is_default: true,
            created,
        }
    }
}

/// Which users a list returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserQuery {
    /// Only users with this tag (exact match).
    pub tag: Option<String>,
    /// Only test users (`Some(true)`) or only the others (`Some(false)`).
    pub test_user: Option<bool>,
}

/// Storage of end users and their tags (a port). Every call is scoped to its environment: a
/// user is known by (environment, id), and nothing of another environment is read or changed.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait EndUserRepository: Send + Sync {
    /// Inserts or replaces every user (test flag, tags, attributes; `created` is kept for an
    /// existing user), all in one transaction.
    ///
    /// All or nothing: an error must leave every user as it was ([`AudienceService::put_users`]
    /// promises that). A replaced user's tags are exactly the new ones; `updated` is taken
    /// from the user given.
    async fn upsert(&self, users: Vec<EndUser>) -> Result<(), StorageError>;
    /// The user with this id in the environment, with its tags (sorted); None when there is
    /// none.
    async fn get(
        &self,
        environment_id: &str,
        user_id: &str,
    ) -> Result<Option<EndUser>, StorageError>;
    /// Deletes the user and its tags. False when there was no such user.
    async fn delete(&self, environment_id: &str, user_id: &str) -> Result<bool, StorageError>;
    /// An end user signing in (contract §15), in one transaction: when the environment has no
    /// user of this id, creates it (not a test user, no tags) with `attributes`, `created`
    /// and `updated` at `at`; otherwise sets each of `attributes` on it, keeping its other
    /// attributes and its tags, and `updated` at `at` only when a value changed (an
    /// unchanged user is not written). A new attribute past [`MAX_ATTRIBUTES_PER_USER`] is
    /// left out.
    async fn merge_attributes(
        &self,
        environment_id: &str,
        user_id: &str,
        attributes: Map<String, Value>,
        at: Timestamp,
    ) -> Result<(), StorageError>;
    /// Users matching the query, by id, after `page.after`, at most `page.limit + 1`.
    ///
    /// In ascending order of id, strictly after `page.after` when given: the services page
    /// through with the last id read as the next `after`, and the extra user only tells that
    /// more follow. Each user comes with its tags.
    async fn list(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<EndUser>, StorageError>;
    /// Like [`EndUserRepository::list`], ids only: what a fan-out needs when no filter is
    /// applied (no attributes or tags read).
    async fn ids(
        &self,
        environment_id: &str,
        query: &UserQuery,
        page: &PageRequest,
    ) -> Result<Vec<String>, StorageError>;
}

/// Storage of segments (a port). Every call is scoped to its environment: a segment id of
/// another environment is not found.
///
/// A segment's filter is stored as its [`Filter::source`] and parsed again when read; a
/// stored filter that no longer parses is a [`StorageError::Internal`].
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SegmentRepository: Send + Sync {
    /// Stores a new segment (its id is new; names need not be unique).
    async fn insert(&self, segment: &Segment) -> Result<(), StorageError>;
    /// The segment with this id in the environment; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        segment_id: &str,
    ) -> Result<Option<Segment>, StorageError>;
    /// Every segment of the environment, by name.
    async fn list(&self, environment_id: &str) -> Result<Vec<Segment>, StorageError>;
    /// Replaces name and filter. False when there is no such segment.
    ///
    /// Also sets `updated`; `created` is left as stored. The segment is found by its
    /// `environment_id` and `id`.
    async fn update(&self, segment: &Segment) -> Result<bool, StorageError>;
    /// Deletes the segment. False when there was no such segment in the environment.
    async fn delete(&self, environment_id: &str, segment_id: &str) -> Result<bool, StorageError>;
}

/// Storage of streams (a port). Every call is scoped to its environment; stream names are
/// unique within an environment.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamRepository: Send + Sync {
    /// The environment's streams, the default one first; the default is created when missing.
    ///
    /// When the environment has no default stream yet, `default` (a [`Stream::default_for`]
    /// the caller built) is stored first, in the same transaction as the read; of two first
    /// listings that race, one stores it and the other stores nothing. The others follow,
    /// oldest first. The trigger engine takes the default stream's id from this answer, so it
    /// must always be in it.
    async fn list(
        &self,
        environment_id: &str,
        default: Stream,
    ) -> Result<Vec<Stream>, StorageError>;
    /// A name used by another stream of the environment is a `UniqueViolation`.
    ///
    /// It must be [`StorageError::UniqueViolation`]: the service answers it with
    /// [`ConflictKind::StreamNameTaken`].
    async fn insert(&self, stream: &Stream) -> Result<(), StorageError>;
    /// The stream with this id in the environment; None when there is none.
    async fn get(
        &self,
        environment_id: &str,
        stream_id: &str,
    ) -> Result<Option<Stream>, StorageError>;
    /// Deletes a stream that is not the default one. False when there was no such stream; the
    /// default stream is never deleted (false for it too).
    async fn delete(&self, environment_id: &str, stream_id: &str) -> Result<bool, StorageError>;
}

/// Checks a user id (the caller's own string): 1–255 characters, no control characters.
///
/// Adds at most one problem to `errors`, at `field`.
pub fn validate_user_id(errors: &mut Vec<FieldError>, field: &str, id: &str) {
    if id.is_empty() {
        errors.push(FieldError::new(field, "must not be empty"));
    } else if id.chars().count() > USER_ID_MAX_CHARS {
        errors.push(FieldError::new(
            field,
            format!("must be at most {USER_ID_MAX_CHARS} characters"),
        ));
    } else if id.chars().any(char::is_control) {
        errors.push(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
}

/// Validates a user sent whole and normalises its tags (sorted, deduplicated).
///
/// Every problem is added to `errors` with its path under `prefix` (`users[3].tags[0]`; plain
/// `tags[0]` when `prefix` is empty): the id, at most [`MAX_TAGS_PER_USER`] tags of 1 to
/// [`TAG_MAX_CHARS`] characters, at most [`MAX_ATTRIBUTES_PER_USER`] attributes with names of
/// 1 to [`ATTRIBUTE_NAME_MAX_CHARS`] characters and scalar values (strings of at most
/// [`ATTRIBUTE_VALUE_MAX_CHARS`] characters). The input comes back normalised even when it has
/// problems.
pub fn validate_user(
    errors: &mut Vec<FieldError>,
    prefix: &str,
    mut input: UserInput,
) -> UserInput {
    let at = |field: &str| {
        if prefix.is_empty() {
            field.to_owned()
        } else {
            format!("{prefix}.{field}")
        }
    };
    validate_user_id(errors, &at("id"), &input.id);
    if input.tags.len() > MAX_TAGS_PER_USER {
        errors.push(FieldError::new(
            at("tags"),
            format!("at most {MAX_TAGS_PER_USER} tags"),
        ));
    }
    for (i, tag) in input.tags.iter().enumerate() {
        let length = tag.chars().count();
        if length == 0 || length > TAG_MAX_CHARS || tag.chars().any(char::is_control) {
            errors.push(FieldError::new(
                format!("{}[{i}]", at("tags")),
                format!("a tag is 1 to {TAG_MAX_CHARS} characters without control characters"),
            ));
        }
    }
    input.tags.sort();
    input.tags.dedup();
    if input.attributes.len() > MAX_ATTRIBUTES_PER_USER {
        errors.push(FieldError::new(
            at("attributes"),
            format!("at most {MAX_ATTRIBUTES_PER_USER} attributes"),
        ));
    }
    for (name, value) in &input.attributes {
        let path = format!("{}.{name}", at("attributes"));
        if name.is_empty() || name.chars().count() > ATTRIBUTE_NAME_MAX_CHARS {
            errors.push(FieldError::new(
                &path,
                format!("attribute names are 1 to {ATTRIBUTE_NAME_MAX_CHARS} characters"),
            ));
        }
        match value {
            Value::String(s) if s.chars().count() > ATTRIBUTE_VALUE_MAX_CHARS => {
                errors.push(FieldError::new(
                    &path,
                    format!("must be at most {ATTRIBUTE_VALUE_MAX_CHARS} characters"),
                ))
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
            _ => errors.push(FieldError::new(
                &path,
                "must be a string, a number or a boolean",
            )),
        }
    }
    input
}

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

    /// Creates a segment from a name and a filter document (see [`filter`]). Needs
    /// `users:write`. The problems of the name (at `name`) and of the filter (at `filter...`)
    /// come back together as [`DomainError::Validation`]. The answer is the segment stored.
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

#[cfg(test)]
mod tests;
