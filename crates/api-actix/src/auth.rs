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

/// The caller of an end user's own route (contract §15: the feed, card actions, devices): a
/// customer key as [`Caller`], or that end user's token, verified against the environment's
/// SDK keys. A refused token answers 401 with `WWW-Authenticate: Bearer
/// error="invalid_token"` and the reason's code, or 403 when it is another user's. The
/// handler then checks with [`Principal::authorize_user`].
pub struct UserCaller(pub Principal);

/// Whether a bearer is a JWT rather than a key secret or access token: three base64url
/// parts, the first a JSON object (`eyJ`).
pub(crate) fn is_jwt(credential: &str) -> bool {
    credential.starts_with("eyJ") && credential.bytes().filter(|b| *b == b'.').count() == 2
}

/// The credential of an `Authorization: Bearer ...` header, if well formed.
pub(crate) fn bearer(req: &HttpRequest) -> Result<String, ApiError> {
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

impl FromRequest for UserCaller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let credential = match bearer(req) {
            Ok(credential) if is_jwt(&credential) => credential,
            _ => {
                let key = Caller::from_request(req, payload);
                return Box::pin(async move { key.await.map(|Caller(p)| UserCaller(p)) });
            }
        };
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let environment = req.match_info().get("environmentId").map(str::to_owned);
        let user = req.match_info().get("endUserId").map(str::to_owned);
        let req = req.clone();
        Box::pin(async move {
            let state = state.ok_or_else(ApiError::internal)?;
            let (Some(environment), Some(user)) = (environment, user) else {
                return Err(ApiError::unauthorized(
                    "a user token reaches only its own user's routes",
                ));
            };
            let principal = state
                .sdk
                .authenticate_user(&environment.into(), &user, &credential)
                .await?;
            // A bucket per signed-in user (contract §16: `WORKBENCH_RATE_LIMIT_USER`).
            if let Some(allowance) = state.limits.user(&principal.key_id) {
                req.extensions_mut().insert(allowance);
                if let Some(refusal) = allowance.refusal("this end user") {
                    return Err(refusal);
                }
            }
            Ok(UserCaller(principal))
        })
    }
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
            state.limits.admit_key(&req, &principal.key_id)?;
            Ok(Caller(principal))
        })
    }
}
