//! A test trigger from the flow's page.

use actix_web::{web, HttpResponse};
use domain::id::{EnvironmentId, FlowId};
use domain::trigger::Mode;
use domain::DomainError;

use super::page::{refused, Shown};
use super::TestForm;
use crate::console::failed;
use crate::console::page::{self};
use crate::console::session::{Posted, Refusal};
use crate::console::shell::{see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/console/{env}/flows/{id}/test", web::post().to(test));
}

async fn test(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId)>,
    posted: Posted<TestForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id) = path.into_inner();
    let Posted { session, form } = posted;
    let result = match form.request() {
        Ok(body) => {
            state
                .triggers
                .trigger_body(&session.principal, &env, &id, Mode::Test, &body)
                .await
        }
        Err(err) => Err(err),
    };
    match result {
        Ok(ids) => match ids.first() {
            Some(invocation) => Ok(see_other(&format!(
                "{ROOT}/{env}/flows/{id}/invocations/{}",
                page::url_path(invocation)
            ))),
            None => Err(failed(&DomainError::invalid("flows", "no invocation"))),
        },
        Err(err) => {
            let place = |p| Shown {
                action: Some(p),
                test: Some(&form),
                ..Shown::default()
            };
            refused(&state, &session, &env, &id, err, place).await
        }
    }
}
