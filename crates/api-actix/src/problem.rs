//! Every error the service answers is an RFC 9457 problem (contract §1):
//! `Content-Type: application/problem+json`, a stable snake_case `code`, and `errors` listing
//! every field problem found.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use domain::sdk::TokenRefusal;
use domain::{ConflictKind, DomainError, FieldError, StorageError};
use serde::Serialize;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::ToResponse;
use utoipa::ToSchema;

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem details document.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:workbench:error:validation_failed",
    "title": "Validation failed",
    "status": 400,
    "detail": "The request has 1 invalid field.",
    "code": "validation_failed",
    "errors": [{"field": "name", "message": "must not be empty"}]
}))]
pub struct Problem {
    /// `urn:workbench:error:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind (the same for every problem of a code).
    pub title: String,
    /// The HTTP status, again.
    pub status: u16,
    /// What happened, for a person.
    pub detail: String,
    /// Stable machine-readable code (see docs/errors.md).
    pub code: String,
    /// Every field-level problem found (empty when the error is not about fields).
    pub errors: Vec<FieldProblem>,
    /// OAuth 2.0 error code, on `/oauth/token` errors only (RFC 6749 §5.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why `/readyz` is not ready, when it is for a reason of its own (`storage_full`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldProblem {
    /// JSON path of the offending input, e.g. `name` or `flows[0].target.type`.
    pub field: String,
    pub message: String,
}

/// An error answer: status, code, human text, field problems, and a few headers. Boxed, so
/// that every `Result<_, ApiError>` stays one pointer wide.
#[derive(Debug)]
pub struct ApiError(Box<Details>);

#[derive(Debug)]
struct Details {
    status: StatusCode,
    code: &'static str,
    title: &'static str,
    detail: String,
    errors: Vec<FieldError>,
    challenge: Option<&'static str>,
    oauth_error: Option<&'static str>,
    /// Echoed as `X-Request-Id` when the error is rendered outside the edge middleware's reach.
    request_id: Option<String>,
    /// Seconds for `Retry-After` (429, 503).
    retry_after: Option<u64>,
    reason: Option<&'static str>,
    /// The connection closes after this answer (the request's body was not read).
    close: bool,
}

/// `Retry-After` of a `storage_full` answer.
pub const STORAGE_FULL_RETRY_SECONDS: u64 = 5;

impl ApiError {
    /// An error of `status` and `code` with `detail` and no field problems.
    pub fn new(
        status: StatusCode,
        code: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        ApiError(Box::new(Details {
            status,
            code,
            title,
            detail: detail.into(),
            errors: Vec::new(),
            challenge: None,
            oauth_error: None,
            request_id: None,
            retry_after: None,
            reason: None,
            close: false,
        }))
    }

    /// 400 `validation_failed` with every field problem.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = match errors.len() {
            1 => "The request has 1 invalid field.".to_owned(),
            n => format!("The request has {n} invalid fields."),
        };
        let mut err = Self::new(
            StatusCode::BAD_REQUEST,
            "validation_failed",
            "Validation failed",
            detail,
        );
        err.0.errors = errors;
        err
    }

    /// 400 `malformed_json`: a body that is not the JSON asked for.
    pub fn malformed_json(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            "Malformed JSON",
            detail,
        )
    }

    /// 401 `unauthorized`, with a `WWW-Authenticate: Bearer` challenge.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        )
        .with_challenge("Bearer realm=\"workbench\"")
    }

    /// 415 `unsupported_media_type`, naming the type expected.
    pub fn unsupported_media_type(expected: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "Unsupported media type",
            format!("the request body must be sent with Content-Type: {expected}"),
        )
    }

    /// 500 `internal_error`, saying nothing of the cause.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "Internal server error",
            "The server failed to handle the request; it has been logged with the request id.",
        )
    }

    /// The challenge sent with a 401 (`WWW-Authenticate`).
    pub fn with_challenge(mut self, challenge: &'static str) -> Self {
        self.0.challenge = Some(challenge);
        self
    }

    /// The RFC 6749 `error` member, for the token endpoint.
    pub fn with_oauth_error(mut self, error: &'static str) -> Self {
        self.0.oauth_error = Some(error);
        self
    }

    /// 408: the request's body did not arrive within `limit` (contract §16); the connection is
    /// closed after the answer.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        let mut err = Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "Request timeout",
            format!(
                "the request body did not arrive within {} s",
                limit.as_secs_f64()
            ),
        );
        err.0.close = true;
        err
    }

    /// 503 `processing_timeout`: the request arrived whole, but its work did not end within
    /// `limit` and was stopped where it stood.
    pub fn processing_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "processing_timeout",
            "Processing timeout",
            format!(
                "the request arrived whole but was not processed within {} s, and its work was \
                 stopped where it stood: send it again only if it is idempotent (a start with \
                 its flowInvocationId); a CSV upload's task has failed, create another",
                limit.as_secs_f64()
            ),
        )
    }

    /// 429 `rate_limited` (contract §16): `who` sent more than its limit; the next request
    /// may go in `retry_after` seconds.
    pub fn rate_limited(retry_after: u64, who: &str) -> Self {
        let mut err = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "Too many requests",
            format!(
                "{who} sent more requests than its rate limit allows; try again in {retry_after} s"
            ),
        );
        err.0.retry_after = Some(retry_after);
        err
    }

    /// The disk has no room for the write, or the low-disk guard refuses new work
    /// (contract §18): 503 `storage_full`, to be tried again later.
    pub fn storage_full() -> Self {
        let mut err = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_full",
            "Storage full",
            "the service is short of disk space and takes no new work; try again later",
        );
        err.0.retry_after = Some(STORAGE_FULL_RETRY_SECONDS);
        err
    }

    /// A `reason` member in the problem (`/readyz`).
    pub fn with_reason(mut self, reason: &'static str) -> Self {
        self.0.reason = Some(reason);
        self
    }

    /// The same error carrying the request's id.
    pub fn with_request_id(mut self, id: String) -> Self {
        self.0.request_id = Some(id);
        self
    }

    /// The problem for an error response produced outside our handlers (actix's router,
    /// payload limits, ...), chosen by status.
    pub fn from_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => Self::malformed_json("the request could not be read"),
            401 => Self::unauthorized("missing or invalid credential"),
            404 => Self::new(status, "not_found", "Not found", "no resource at this path"),
            405 => Self::new(
                status,
                "method_not_allowed",
                "Method not allowed",
                "this path does not accept this method",
            ),
            413 => Self::new(
                status,
                "payload_too_large",
                "Payload too large",
                "the request body exceeds the limit for this endpoint",
            ),
            415 => Self::unsupported_media_type("application/json"),
            500 => Self::internal(),
            503 => Self::new(
                status,
                "service_unavailable",
                "Service unavailable",
                "try again shortly",
            ),
            _ if status.is_server_error() => {
                let mut err = Self::internal();
                err.0.status = status;
                err
            }
            _ => Self::new(
                status,
                "http_error",
                "Request failed",
                status.canonical_reason().unwrap_or("request failed"),
            ),
        }
    }

    /// Its stable code (docs/errors.md).
    pub fn code(&self) -> &'static str {
        self.0.code
    }

    /// The problem document (the console shows its detail and field problems).
    pub(crate) fn problem(&self) -> Problem {
        self.body()
    }

    /// The problem document as JSON, for a response written outside actix-web's reach.
    pub(crate) fn json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body()).unwrap_or_default()
    }

    fn body(&self) -> Problem {
        let d = &self.0;
        Problem {
            kind: format!("urn:workbench:error:{}", d.code),
            title: d.title.to_owned(),
            status: d.status.as_u16(),
            detail: d.detail.clone(),
            code: d.code.to_owned(),
            errors: d
                .errors
                .iter()
                .map(|e| FieldProblem {
                    field: e.field.clone(),
                    message: e.message.clone(),
                })
                .collect(),
            error: d.oauth_error.map(str::to_owned),
            reason: d.reason.map(str::to_owned),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.0.status.as_u16(),
            self.0.code,
            self.0.detail
        )
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.0.status
    }

    fn error_response(&self) -> HttpResponse {
        let d = &self.0;
        let mut response = HttpResponse::build(d.status);
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        ));
        response.insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
        if d.close {
            response.force_close();
        }
        if let Some(challenge) = d.challenge {
            response.insert_header((header::WWW_AUTHENTICATE, challenge));
        }
        if let Some(id) = &d.request_id {
            response.insert_header(("x-request-id", id.as_str()));
        }
        match (d.retry_after, d.status) {
            (Some(seconds), _) => {
                response.insert_header((header::RETRY_AFTER, seconds.to_string()));
            }
            (None, StatusCode::SERVICE_UNAVAILABLE) => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            _ => {}
        }
        match serde_json::to_vec(&self.body()) {
            Ok(body) => response.body(body),
            Err(_) => response.finish(),
        }
    }
}

/// What a refused end-user token is told (contract §15).
fn token_refusal(why: TokenRefusal) -> &'static str {
    match why {
        TokenRefusal::Malformed => {
            "the token is not a JWT, or lacks `kid`, `sub`, `exp` or `iat`, or names no valid user"
        }
        TokenRefusal::UnknownKey => "the token's `kid` names no SDK key of this environment",
        TokenRefusal::Algorithm => {
            "the token's `alg` is not the one its SDK key allows (RS256 for RSA, ES256 for EC)"
        }
        TokenRefusal::Signature => "the token's signature does not verify with its SDK key",
        TokenRefusal::Expired => "the token has expired, or is not valid yet (`nbf`)",
        TokenRefusal::Lifetime => {
            "the token lives longer than its SDK key's maxTokenExpiryDays, or was issued in the \
             future"
        }
        TokenRefusal::Issuer => "the token's `iss` is not one of its SDK key's allowedIssuers",
        TokenRefusal::OtherUser => "the token is for another end user",
    }
}

fn conflict_code(kind: ConflictKind) -> &'static str {
    match kind {
        ConflictKind::FolderNameTaken => "folder_name_taken",
        ConflictKind::FolderHasChildren => "folder_has_children",
        ConflictKind::EnvironmentNameTaken => "environment_name_taken",
        ConflictKind::DraftExists => "draft_exists",
        ConflictKind::FlowArchived => "flow_archived",
        ConflictKind::ConcurrentChange => "concurrent_change",
        ConflictKind::StreamNameTaken => "stream_name_taken",
        ConflictKind::DefaultStream => "default_stream",
        ConflictKind::InvocationConflict => "invocation_conflict",
        ConflictKind::CardClosed => "card_closed",
        ConflictKind::CardNotActive => "card_not_active",
        ConflictKind::SubscriptionLimit => "webhook_limit_reached",
        ConflictKind::SubscriptionEnabled => "webhook_enabled",
        ConflictKind::SubscriptionDisabled => "webhook_disabled",
        ConflictKind::AlreadyUploaded => "already_uploaded",
        ConflictKind::PlatformExists => "platform_exists",
        ConflictKind::PlatformEnabled => "platform_enabled",
        ConflictKind::SdkKeyNameTaken => "sdk_key_name_taken",
        ConflictKind::SdkKeyLimit => "sdk_key_limit_reached",
        ConflictKind::DeviceTaken => "device_taken",
    }
}

impl From<DomainError> for ApiError {
    fn from(err: DomainError) -> Self {
        match err {
            DomainError::Validation(errors) => ApiError::validation(errors),
            DomainError::InvalidConfig(errors) => invalid_config(errors),
            DomainError::InvocationMismatch(detail) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invocation_mismatch",
                "Invocation mismatch",
                detail,
            ),
            DomainError::RateLimited {
                retry_after_seconds,
                message,
            } => rate_limited(retry_after_seconds, message),
            DomainError::ApprovalRequired(detail) => ApiError::new(
                StatusCode::FORBIDDEN,
                "approvals_enabled",
                "Approval required",
                detail,
            ),
            DomainError::LegacyFcmKey(detail) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "legacy_fcm_key_unsupported",
                "Legacy FCM key unsupported",
                detail,
            ),
            DomainError::NotFound(resource) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "Not found",
                format!("no such {resource} in this environment"),
            ),
            DomainError::Conflict { kind, message } => ApiError::new(
                StatusCode::CONFLICT,
                conflict_code(kind),
                "Conflict",
                message,
            ),
            DomainError::Unauthenticated => ApiError::unauthorized(
                "the credential is missing, invalid, expired or revoked, or has no access to this \
                    environment",
            ),
            DomainError::Forbidden(detail) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
            }
            DomainError::TokenRefused(why) => token_refused(why),
            DomainError::Storage(cause) => storage_failure(cause),
        }
    }
}

/// 400 `invalid_config`: a flow's configuration refused, with every field problem.
fn invalid_config(errors: Vec<FieldError>) -> ApiError {
    let mut err = ApiError::validation(errors);
    err.0.code = "invalid_config";
    err.0.title = "Invalid configuration";
    err
}

/// 429 `rate_limited` as the domain decided it, with its own message.
fn rate_limited(retry_after_seconds: u64, message: String) -> ApiError {
    let mut err = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "Too many requests",
        message,
    );
    err.0.retry_after = Some(retry_after_seconds);
    err
}

/// A refused end-user token (contract §15): 403 when it is another user's, else 401 with its
/// reason's code and an `invalid_token` challenge.
fn token_refused(why: TokenRefusal) -> ApiError {
    match why {
        TokenRefusal::OtherUser => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Forbidden",
            "the token is for another end user (its `sub` is not the path's user)",
        ),
        why => ApiError::new(
            StatusCode::UNAUTHORIZED,
            why.code(),
            "Invalid token",
            token_refusal(why),
        )
        .with_challenge("Bearer error=\"invalid_token\""),
    }
}

/// A storage failure, logged here with its cause (which the answer never shows): 503
/// `storage_full` for a full disk, 503 when the database is unreachable, else 500.
fn storage_failure(cause: StorageError) -> ApiError {
    match cause {
        StorageError::Full(cause) => {
            tracing::warn!(%cause, "write refused: storage full");
            ApiError::storage_full()
        }
        StorageError::Unavailable(cause) => {
            tracing::error!(%cause, "storage unavailable");
            ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE)
        }
        cause => {
            tracing::error!(%cause, "storage failure");
            ApiError::internal()
        }
    }
}

/// A problem document answer, as the OpenAPI document declares it.
pub(crate) fn problem(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/problem+json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build(),
    )
}

/// `#/components/responses/NotFound`, which operations that read an id of their path declare.
pub struct NotFound;

impl<'r> ToResponse<'r> for NotFound {
    fn response() -> (&'r str, RefOr<Response>) {
        (
            "NotFound",
            problem(
                "Not found (`not_found`): no resource with an id of the path in this \
                 environment",
            )
            .build()
            .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;
    use domain::Resource;

    use super::*;

    fn render(err: ApiError) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = err.error_response();
        let status = response.status();
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some(PROBLEM_CONTENT_TYPE)
        );
        let bytes = response
            .into_body()
            .try_into_bytes()
            .expect("a complete body");
        (
            status,
            challenge,
            serde_json::from_slice(&bytes).expect("json"),
        )
    }

    #[test]
    fn validation_errors_list_every_field() {
        let err: ApiError = DomainError::Validation(vec![
            FieldError::new("name", "must not be empty"),
            FieldError::new("parentId", "unknown"),
        ])
        .into();
        let (status, _, body) = render(err);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["type"], "urn:workbench:error:validation_failed");
        assert_eq!(body["code"], "validation_failed");
        assert_eq!(body["status"], 400);
        assert_eq!(body["errors"][1]["field"], "parentId");
        assert_eq!(body["errors"].as_array().map(Vec::len), Some(2));
        assert!(body.get("error").is_none());
    }

    #[test]
    fn domain_errors_map_to_their_status_and_code() {
        let cases: Vec<(DomainError, u16, &str)> = vec![
            (DomainError::NotFound(Resource::Folder), 404, "not_found"),
            (
                DomainError::conflict(ConflictKind::FolderNameTaken, "x"),
                409,
                "folder_name_taken",
            ),
            (
                DomainError::conflict(ConflictKind::FolderHasChildren, "x"),
                409,
                "folder_has_children",
            ),
            (DomainError::Forbidden("x".into()), 403, "forbidden"),
            (
                DomainError::ApprovalRequired("x".into()),
                403,
                "approvals_enabled",
            ),
            (
                DomainError::InvalidConfig(vec![FieldError::new("config.type", "x")]),
                400,
                "invalid_config",
            ),
            (
                DomainError::conflict(ConflictKind::DraftExists, "x"),
                409,
                "draft_exists",
            ),
            (
                DomainError::conflict(ConflictKind::FlowArchived, "x"),
                409,
                "flow_archived",
            ),
            (
                DomainError::NotFound(Resource::FlowVersion),
                404,
                "not_found",
            ),
            (DomainError::Unauthenticated, 401, "unauthorized"),
            (
                StorageError::Unavailable("pool".into()).into(),
                503,
                "service_unavailable",
            ),
            (
                StorageError::Internal("boom".into()).into(),
                500,
                "internal_error",
            ),
        ];
        for (err, status, code) in cases {
            let (actual, challenge, body) = render(err.into());
            assert_eq!(actual.as_u16(), status, "{code}");
            assert_eq!(body["code"], code);
            assert_eq!(challenge.is_some(), status == 401, "{code}");
        }
    }

    #[test]
    fn internal_errors_do_not_leak_their_cause() {
        let (_, _, body) =
            render(DomainError::from(StorageError::Internal("password=hunter2".into())).into());
        assert!(!body.to_string().contains("hunter2"));
    }
}
