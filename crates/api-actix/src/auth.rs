//! `Authorization: Bearer <secret or token>` → the domain's [`Principal`], within the key's
//! rate limit.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use domain::Principal;

use crate::problem::ApiError;
use crate::AppState;

/// The authenticated caller. Extracting it answers 401 (with `WWW-Authenticate: Bearer`)
/// for a missing, malformed, unknown, revoked or expired credential, and 429 for a key past
/// its rate limit.
pub struct Caller(pub Principal);

/// The credential of an `Authorization: Bearer ...` header, if well formed.
fn bearer(req: &HttpRequest) -> Result<String, ApiError> {
    let value = req.headers().get(header::AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthorized("send the API key as `Authorization: Bearer <key>`")
    })?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not valid text"))?;
    let (scheme, credential) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthorized("the Authorization header must be `Bearer <key>`"))?;
    let credential = credential.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || credential.is_empty() {
        return Err(ApiError::unauthorized(
            "the Authorization header must be `Bearer <key>`",
        ));
    }
    Ok(credential.to_owned())
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let credential = bearer(req);
        // The environment the request is for, so that a caller remembered without it (one
        // created since) is read again rather than refused.
        let environment = req.match_info().get("environmentId").map(str::to_owned);
        let req = req.clone();
        Box::pin(async move {
            let state = state.ok_or_else(ApiError::internal)?;
            let principal = state
                .auth
                .authenticate_for(&credential?, environment.as_deref())
                .await?;
            // Contract §16: a bucket per key, checked before anything else of the request is
            // read. The edge writes where the caller stands into the answer.
            if let Some(allowance) = state.limits.key(&principal.key_id) {
                req.extensions_mut().insert(allowance);
                if let Some(refusal) = allowance.refusal("this API key") {
                    return Err(refusal);
                }
            }
            Ok(Caller(principal))
        })
    }
}
