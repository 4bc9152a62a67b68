//! `POST /oauth/token`: the OAuth 2.0 client-credentials exchange (RFC 6749 §4.4).
//! Errors are problem documents that also carry RFC 6749's `error` member.

use std::collections::HashMap;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use domain::DomainError;
use serde::Serialize;
use utoipa::ToSchema;

use crate::problem::{ApiError, Problem};
use crate::AppState;

const FORM: &str = "application/x-www-form-urlencoded";
const BASIC_CHALLENGE: &str = "Basic realm=\"workbench\"";

#[derive(ToSchema)]
#[allow(dead_code)] // documents the request; the form is read by hand below
#[schema(example = json!({"grant_type": "client_credentials"}))]
pub struct TokenRequest {
    /// `client_credentials`, the one grant this service issues tokens for.
    #[schema(pattern = "^client_credentials$")]
    grant_type: String,
    /// With `client_secret`, instead of HTTP Basic authentication (`client_secret_post`);
    /// never together with an `Authorization` header that names another client.
    client_id: Option<String>,
    /// With `client_id`, instead of HTTP Basic authentication; never together with it.
    client_secret: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TokenResponse {
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds until the token expires (3600).
    pub expires_in: i64,
}

/// The parameters this exchange reads. RFC 6749 §3.1 says any other parameter is ignored.
const KNOWN: [&str; 4] = ["grant_type", "client_id", "client_secret", "scope"];

/// The form's known parameters, each sent once: RFC 6749 §3.1 and §3.2 say a parameter must not
/// repeat, and a proxy that reads the first of two values would see another client or grant
/// than this service, which would read the last. Unknown parameters are dropped unread, repeated
/// or not, as §3.1 says.
fn one_value_each(pairs: Vec<(String, String)>) -> Result<HashMap<String, String>, ApiError> {
    let mut form = HashMap::with_capacity(KNOWN.len());
    for (name, value) in pairs {
        if !KNOWN.contains(&name.as_str()) {
            continue;
        }
        if form.contains_key(&name) {
            return Err(invalid_request(format!(
                "the parameter `{name}` is sent more than once; send each once"
            )));
        }
        form.insert(name, value);
    }
    Ok(form)
}

fn invalid_client(detail: &str) -> ApiError {
    ApiError::unauthorized(detail.to_owned())
        .with_challenge(BASIC_CHALLENGE)
        .with_oauth_error("invalid_client")
}

/// `client_id:client_secret` from `Authorization: Basic ...`, if present.
fn basic_credentials(req: &HttpRequest) -> Result<Option<(String, String)>, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed =
        || invalid_client("the Authorization header must be `Basic base64(clientId:clientSecret)`");
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, encoded) = value.split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(malformed());
    }
    let decoded = STANDARD.decode(encoded.trim()).map_err(|_| malformed())?;
    let decoded = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (id, secret) = decoded.split_once(':').ok_or_else(malformed)?;
    Ok(Some((id.to_owned(), secret.to_owned())))
}

/// Exchange a key's client id and secret for a one-hour bearer token.
#[utoipa::path(
    post, path = "/oauth/token", tag = "credentials", operation_id = "issueToken",
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "A bearer token valid for one hour", body = TokenResponse),
        (status = 400, description = "`grant_type` missing, a parameter sent more than once, or \
            credentials both in the Authorization header and in the form (`invalid_request`); or \
            `grant_type` not `client_credentials` (`unsupported_grant_type`)",
            body = Problem, content_type = "application/problem+json"),
        (status = 401,
            description = "Unknown client, wrong secret or revoked key (`error`: \
                `invalid_client`)", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not application/x-www-form-urlencoded",
            body = Problem, content_type = "application/problem+json"),
        (status = 429,
            description = "Too many exchanges from this client address or for this client id \
                (`rate_limited`); `Retry-After` says when to try again", body = Problem,
                    content_type = "application/problem+json"),
    ),
    // HTTP Basic (`client_secret_basic`), or no Authorization header and the credentials in
    // the form (`client_secret_post`).
    security(("basic" = []), ())
)]
pub async fn token(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // Contract §16: per client address first (before a credential is looked at), then per
    // client id; the answer says where the caller stands on the one that binds first.
    let by_address = state.limits.admit_token_address(&req)?;
    let form = read_form(&req, &body)?;
    check_grant(&form)?;
    let (client_id, client_secret) = client_credentials(&req, &form)?;
    state
        .limits
        .admit_token_client(&req, &client_id, by_address)?;
    let issued = match state
        .auth
        .exchange_client_credentials(&client_id, &client_secret)
        .await
    {
        Ok(issued) => issued,
        Err(DomainError::Unauthenticated) => {
            return Err(invalid_client(
                "unknown client, wrong secret, or revoked key",
            ))
        }
        Err(other) => return Err(other.into()),
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::PRAGMA, "no-cache"))
        .json(TokenResponse {
            access_token: issued.access_token,
            token_type: "Bearer",
            expires_in: issued.expires_in,
        }))
}

/// RFC 6749's `invalid_request`: a form this exchange cannot read as a request.
fn invalid_request(detail: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "Invalid request",
        detail,
    )
    .with_oauth_error("invalid_request")
}

/// The form's known parameters: a form body (415 otherwise) that can be read, each sent once.
fn read_form(req: &HttpRequest, body: &[u8]) -> Result<HashMap<String, String>, ApiError> {
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(FORM)
        });
    if !is_form {
        return Err(ApiError::unsupported_media_type(FORM));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|e| invalid_request(format!("the form cannot be read: {e}")))?;
    one_value_each(pairs)
}

/// Refuses a form without `grant_type`, or with another grant than `client_credentials`.
fn check_grant(form: &HashMap<String, String>) -> Result<(), ApiError> {
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => Ok(()),
        None => Err(invalid_request("`grant_type` is required")),
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "Unsupported grant type",
            format!("grant_type `{other}` is not supported; use `client_credentials`"),
        )
        .with_oauth_error("unsupported_grant_type")),
    }
}

/// The client id and secret, from HTTP Basic or else from the form, never from both.
fn client_credentials(
    req: &HttpRequest,
    form: &HashMap<String, String>,
) -> Result<(String, String), ApiError> {
    match basic_credentials(req)? {
        // One place for credentials (RFC 6749 §2.3: a client must not use more than one
        // method; contract §16).
        Some((id, _))
            if form.contains_key("client_secret")
                || form.get("client_id").is_some_and(|form_id| *form_id != id) =>
        {
            Err(invalid_request(
                "credentials were sent both in the Authorization header and in the form (a secret, \
                    or another client id); send them in one",
            ))
        }
        Some(pair) => Ok(pair),
        None => match (form.get("client_id"), form.get("client_secret")) {
            (Some(id), Some(secret)) => Ok((id.clone(), secret.clone())),
            _ => Err(invalid_client(
                "authenticate with HTTP Basic (clientId:clientSecret)",
            )),
        },
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/oauth/token").route(web::post().to(token)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(form: &str) -> Vec<(String, String)> {
        serde_urlencoded::from_str(form).expect("a form")
    }

    #[test]
    fn a_known_parameter_sent_twice_is_refused() {
        for form in [
            "grant_type=password&grant_type=client_credentials",
            "grant_type=client_credentials&client_id=x&client_id=y",
            "grant_type=client_credentials&client_secret=a&client_secret=",
            "grant_type=client_credentials&scope=a&scope=b",
        ] {
            let err = one_value_each(pairs(form)).expect_err(form);
            assert_eq!(
                actix_web::ResponseError::status_code(&err),
                StatusCode::BAD_REQUEST,
                "{form}"
            );
        }
    }

    #[test]
    fn unknown_parameters_are_ignored_even_when_repeated() {
        // Found by the API fuzzer: `then=…&then=&then=…&grant_type=client_credentials` was 400.
        let form = one_value_each(pairs("then=a&then=&then=b&grant_type=client_credentials"))
            .expect("unknown parameters are ignored");
        assert_eq!(form.len(), 1);
        assert_eq!(
            form.get("grant_type").map(String::as_str),
            Some("client_credentials")
        );
    }
}
