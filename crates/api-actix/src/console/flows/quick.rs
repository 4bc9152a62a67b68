//! The edits of the editor's form ([`super::quick_form`]): each made on the latest
//! configuration and saved as the draft ([`domain::flow::edits`]).

use actix_web::{web, HttpResponse};
use domain::flow::edits::{Edit, NewStep, Unit};
use domain::id::{EnvironmentId, FlowId};
use domain::DomainError;
use serde::Deserialize;

use super::page::{refused, Shown};
use crate::console::session::{Posted, Refusal};
use crate::console::shell::{see_other, ROOT};
use crate::AppState;

pub(super) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/console/{env}/flows/{id}/edit/{kind}",
        web::post().to(save),
    );
}

#[derive(Deserialize, Default)]
struct EditForm {
    #[serde(default)]
    template: String,
    #[serde(default)]
    headline: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    button: String,
    #[serde(default)]
    step: String,
    #[serde(default)]
    amount: String,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    after: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
}

impl EditForm {
    fn duration(&self) -> Result<(u32, Unit), DomainError> {
        let amount = self
            .amount
            .trim()
            .parse::<u32>()
            .map_err(|_| DomainError::invalid("amount", "must be a whole number"))?;
        let unit = Unit::parse(&self.unit)
            .ok_or_else(|| DomainError::invalid("unit", "must be minutes, hours, days or weeks"))?;
        Ok((amount, unit))
    }

    /// The edit the form of `kind` stands for.
    fn edit(&self, kind: &str) -> Result<Edit, DomainError> {
        Ok(match kind {
            "template" => Edit::Template {
                template: self.template.clone(),
                headline: self.headline.clone(),
                text: self.text.clone(),
                button: self.button.clone(),
            },
            "wait" => {
                let (amount, unit) = self.duration()?;
                Edit::WaitDuration {
                    step: self.step.clone(),
                    amount,
                    unit,
                }
            }
            "outcome" => Edit::Outcome {
                step: self.step.clone(),
                outcome: self.outcome.clone(),
                target: Some(self.target.clone()).filter(|t| !t.is_empty()),
            },
            "add" => Edit::AddAfter {
                after: self.after.clone(),
                id: self.id.trim().to_owned(),
                kind: match self.kind.as_str() {
                    "wait" => {
                        let (amount, unit) = self.duration()?;
                        NewStep::Wait { amount, unit }
                    }
                    _ => NewStep::Card {
                        name: self.name.clone(),
                    },
                },
            },
            _ => return Err(DomainError::invalid("kind", "is not an edit")),
        })
    }
}

async fn save(
    state: web::Data<AppState>,
    path: web::Path<(EnvironmentId, FlowId, String)>,
    posted: Posted<EditForm>,
) -> Result<HttpResponse, Refusal> {
    let (env, id, kind) = path.into_inner();
    let Posted { session, form } = posted;
    let result = match form.edit(&kind) {
        Ok(edit) => {
            state
                .flows
                .save_edit(&session.principal, &env, &id, &edit)
                .await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => Ok(see_other(&format!("{ROOT}/{env}/flows/{id}?done=saved"))),
        Err(err) => {
            let place = |p| Shown {
                action: Some(p),
                ..Shown::default()
            };
            refused(&state, &session, &env, &id, err, place).await
        }
    }
}
