//! The shapes every handler shares, each in one place: what a handler extracts (a [`Call`]: the
//! state, the caller and the path's ids; a [`Body`]), how it answers ([`ok`], [`created`],
//! [`accepted`], [`no_content`], [`listed`]; a page: `query::paged`) and how it refuses what it
//! read ([`valid`], [`invalid`]). A handler then reads as: parse, call one service method,
//! render.

use std::marker::PhantomData;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse, HttpResponseBuilder};
use domain::id::EnvironmentId;
use domain::{FieldError, Permission, Principal};
use futures_util::future::MapOk;
use futures_util::TryFutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::auth::{Caller, UserCaller};
use crate::body::json_object;
use crate::problem::ApiError;
use crate::AppState;

/// What a handler answers: a response, or the problem document of an [`ApiError`].
pub(crate) type Reply = Result<HttpResponse, ApiError>;

/// A handler's start: the state, the authenticated caller (a key's, or with [`UserCaller`] an
/// end user's own token) and the path's ids. They are extracted as the separate arguments
/// `(web::Data<AppState>, C, web::Path<P>)` were, in that order, so that which refusal comes
/// first (401 before a malformed id, and so on) is as it was.
pub(crate) struct Call<P, C = Caller> {
    pub(crate) state: web::Data<AppState>,
    pub(crate) caller: Principal,
    pub(crate) path: P,
    by: PhantomData<C>,
}

/// The extractors that authenticate a caller.
pub(crate) trait Authenticated: FromRequest + 'static {
    /// Who the caller is.
    fn principal(self) -> Principal;
}

impl Authenticated for Caller {
    fn principal(self) -> Principal {
        self.0
    }
}

impl Authenticated for UserCaller {
    fn principal(self) -> Principal {
        self.0
    }
}

/// The separate arguments a [`Call`] is extracted as.
type Parts<P, C> = (web::Data<AppState>, C, web::Path<P>);

impl<P: DeserializeOwned + 'static, C: Authenticated> Call<P, C> {
    /// The call, from its arguments as actix extracted them.
    fn from_parts((state, caller, path): Parts<P, C>) -> Self {
        Call {
            state,
            caller: caller.principal(),
            path: path.into_inner(),
            by: PhantomData,
        }
    }
}

impl<P: DeserializeOwned + 'static, C: Authenticated> FromRequest for Call<P, C> {
    type Error = actix_web::Error;
    type Future = MapOk<<Parts<P, C> as FromRequest>::Future, fn(Parts<P, C>) -> Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        Parts::<P, C>::from_request(req, payload).map_ok(Self::from_parts as fn(_) -> _)
    }
}

/// The paths whose first id is the environment the request is for.
pub(crate) trait InEnvironment {
    /// The path's environment.
    fn environment(&self) -> &EnvironmentId;
}

impl InEnvironment for EnvironmentId {
    fn environment(&self) -> &EnvironmentId {
        self
    }
}

impl<A> InEnvironment for (EnvironmentId, A) {
    fn environment(&self) -> &EnvironmentId {
        &self.0
    }
}

impl<A, B> InEnvironment for (EnvironmentId, A, B) {
    fn environment(&self) -> &EnvironmentId {
        &self.0
    }
}

impl<P: InEnvironment, C> Call<P, C> {
    /// Refuses a caller that lacks `permission` in the path's environment (401 or 403).
    pub(crate) fn authorize(&self, permission: Permission) -> Result<(), ApiError> {
        Ok(self.caller.authorize(self.path.environment(), permission)?)
    }

    /// The JSON object of `body`, read once the caller is found to hold `permission`: the key
    /// before the body (contract §16), so that 401 and 403 come before 400 and 415.
    pub(crate) fn read(
        &self,
        permission: Permission,
        body: &Body,
    ) -> Result<Map<String, Value>, ApiError> {
        self.authorize(permission)?;
        body.object()
    }
}

/// A request's body as it arrived, read as JSON only when the handler asks (after the
/// caller's permission is checked). Extracted as the arguments `(HttpRequest, web::Bytes)`
/// were.
pub(crate) struct Body {
    req: HttpRequest,
    bytes: web::Bytes,
}

impl FromRequest for Body {
    type Error = actix_web::Error;
    type Future = MapOk<
        <(HttpRequest, web::Bytes) as FromRequest>::Future,
        fn((HttpRequest, web::Bytes)) -> Self,
    >;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        fn body((req, bytes): (HttpRequest, web::Bytes)) -> Body {
            Body { req, bytes }
        }
        <(HttpRequest, web::Bytes)>::from_request(req, payload).map_ok(body as fn(_) -> _)
    }
}

impl Body {
    /// The JSON object sent: 415 for another media type, 400 for malformed JSON or another
    /// value than an object.
    pub(crate) fn object(&self) -> Result<Map<String, Value>, ApiError> {
        json_object(&self.req, &self.bytes)
    }

    /// Whether nothing but white space was sent: an optional body left out.
    pub(crate) fn is_blank(&self) -> bool {
        self.bytes.iter().all(u8::is_ascii_whitespace)
    }
}

/// 200 with `body` as JSON.
pub(crate) fn ok(body: impl Serialize) -> Reply {
    Ok(HttpResponse::Ok().json(body))
}

/// 201 with `body` as JSON, and the new resource's address as `Location`.
pub(crate) fn created(location: String, body: impl Serialize) -> Reply {
    located(HttpResponse::Created(), location, body)
}

/// 202 with `body` as JSON: the work is queued.
pub(crate) fn accepted(body: impl Serialize) -> Reply {
    Ok(HttpResponse::Accepted().json(body))
}

/// 202 with `body` as JSON, and where to follow the queued work as `Location`.
pub(crate) fn accepted_at(location: String, body: impl Serialize) -> Reply {
    located(HttpResponse::Accepted(), location, body)
}

/// `body` as JSON with `location` as `Location`, in the status of `answer`.
fn located(mut answer: HttpResponseBuilder, location: String, body: impl Serialize) -> Reply {
    Ok(answer
        .insert_header((header::LOCATION, location))
        .json(body))
}

/// 204: done, nothing to show.
pub(crate) fn no_content() -> Reply {
    Ok(HttpResponse::NoContent().finish())
}

/// Each item as the API shows it.
pub(crate) fn listed<T, D: From<T>>(items: Vec<T>) -> Vec<D> {
    items.into_iter().map(D::from).collect()
}

/// Refuses the request with every problem found in it (400 `validation_failed`), if any.
pub(crate) fn valid(errors: Vec<FieldError>) -> Result<(), ApiError> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::validation(errors))
    }
}

/// The refusal of a request with one problem, at `field`.
pub(crate) fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::validation(vec![FieldError::new(field, message)])
}
