//! The console's page frame and the pieces every page shares: the navigation, the environment
//! switcher, form fields with their errors in place, and the answer's headers.

use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use domain::tenancy::{Environment, Permission};
use domain::DomainError;
use maud::{html, Markup};

use super::session::{Refusal, Session};
use super::shell::{document, message, ROOT};

/// The sections of the console, with the permission that shows each.
pub(crate) const SECTIONS: [(&str, &str, Permission); 6] = [
    ("flows", "Flows", Permission::ActionFlowsRead),
    ("folders", "Folders", Permission::FoldersRead),
    ("users", "Audience", Permission::UsersRead),
    ("webhooks", "Webhooks", Permission::WebhooksRead),
    (
        "push",
        "Push platforms",
        Permission::NotificationPlatformsRead,
    ),
    ("credentials", "Credentials", Permission::CredentialsRead),
];

/// One page: its title, the section it belongs to, the environment it shows.
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) section: &'a str,
    pub(crate) env: &'a str,
    pub(crate) environments: &'a [Environment],
    pub(crate) session: &'a Session,
}

/// A page of an environment, with the navigation of what the key may read.
pub(crate) fn frame(frame: &Frame<'_>, content: Markup) -> Markup {
    let env = frame.env;
    document(
        frame.title,
        html! {
            a.skip href="#main" { "Skip to the content" }
            header.top {
                span.brand { "Workbench" }
                nav aria-label="Sections" {
                    ul {
                        @for (path, name, permission) in SECTIONS {
                            @if frame.session.may(env, permission) {
                                li {
                                    a href={ (ROOT) "/" (env) "/" (path) }
                                      aria-current=[(frame.section == path).then_some("page")] {
                                          (name) }
                                }
                            }
                        }
                    }
                }
                form.switcher method="get" action={ (ROOT) "/switch" } {
                    label for="environment" { "Environment" }
                    select #environment name="env" {
                        @for e in frame.environments {
                            option value=(e.id) selected[e.id.as_str() == env] { (e.name) }
                        }
                    }
                    input type="hidden" name="section" value=(frame.section);
                    button type="submit" { "Switch" }
                }
                form.signout method="post" action={ (ROOT) "/sign-out" } {
                    (csrf(frame.session))
                    button type="submit" { "Sign out" }
                }
            }
            main #main {
                h1 { (frame.title) }
                (content)
            }
        },
    )
}

/// The hidden field every change carries.
pub(crate) fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A domain error as the console shows it: the status the API would answer, the message, and
/// the problems of each field (by the field's path, as the API names them).
pub(crate) struct Problems {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) fields: Vec<(String, String)>,
}

impl Problems {
    /// The API's own answer to `err` (its status, detail and field problems), so that the
    /// console says what the API would.
    pub(crate) fn of(err: DomainError) -> Problems {
        let api = crate::ApiError::from(err);
        let problem = api.problem();
        Problems {
            status: StatusCode::from_u16(problem.status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            message: problem.detail,
            fields: problem
                .errors
                .into_iter()
                .map(|e| (e.field, e.message))
                .collect(),
        }
    }

    /// The messages about `field` (exactly, or a path inside it when `nested`).
    pub(crate) fn about(&self, field: &str, nested: bool) -> Vec<&(String, String)> {
        self.fields
            .iter()
            .filter(|(f, _)| {
                f == field
                    || (nested
                        && (field.is_empty()
                            || f.strip_prefix(field)
                                .is_some_and(|r| r.starts_with('.') || r.starts_with('['))))
            })
            .collect()
    }
}

/// The summary of a failed change, at the top of the form it belongs to, with the problems of
/// the fields the form does not show (`shown`: the fields it has, each with what lies inside
/// it), so that no message is lost.
pub(crate) fn alert(problems: Option<&Problems>, shown: &[&str]) -> Markup {
    let at_field = |field: &str| {
        shown.iter().any(|s| {
            s.is_empty()
                || field == *s
                || field
                    .strip_prefix(s)
                    .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
        })
    };
    html! {
        @if let Some(p) = problems {
            div.alert role="alert" {
                p { (p.message) }
                @let rest: Vec<&(String, String)> = p.fields.iter().filter(|(f,
                    _)| !at_field(f)).collect();
                (field_errors("", &rest))
            }
        }
    }
}

/// A path segment for `text` (ids chosen by callers may hold `/`, `?`, `#` or `%`).
pub(crate) fn url_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// A labelled text input with the problems of `field` next to it.
pub(crate) fn text_field(
    id: &str,
    label: &str,
    name: &str,
    value: &str,
    field: &str,
    problems: Option<&Problems>,
) -> Markup {
    let errors: Vec<&(String, String)> =
        problems.map(|p| p.about(field, false)).unwrap_or_default();
    let described = format!("{id}-errors");
    html! {
        div.field {
            label for=(id) { (label) }
            input #(id) type="text" name=(name) value=(value)
                aria-invalid=[(!errors.is_empty()).then_some("true")]
                aria-describedby=[(!errors.is_empty()).then_some(described.as_str())];
            (field_errors(&described, &errors))
        }
    }
}

/// A wide text area with its label and, above it, the problems of its field.
pub(crate) struct TextArea<'a> {
    /// The element's id, and the start of its problems' id.
    pub(crate) id: &'a str,
    /// The form field's name.
    pub(crate) name: &'a str,
    pub(crate) label: &'a str,
    pub(crate) rows: &'a str,
    /// The text shown in it.
    pub(crate) value: &'a str,
    pub(crate) errors: &'a [&'a (String, String)],
}

/// A [`TextArea`] as a form shows it.
pub(crate) fn text_area(area: &TextArea<'_>) -> Markup {
    let described = format!("{}-errors", area.id);
    let invalid = !area.errors.is_empty();
    html! {
        div.field.wide {
            label for=(area.id) { (area.label) }
            (field_errors(&described, area.errors))
            textarea #(area.id) name=(area.name) rows=(area.rows) spellcheck="false"
                aria-invalid=[invalid.then_some("true")]
                aria-describedby=[invalid.then_some(described.as_str())] { (area.value) }
        }
    }
}

/// The problems of a field, listed under it.
pub(crate) fn field_errors(id: &str, errors: &[&(String, String)]) -> Markup {
    html! {
        @if !errors.is_empty() {
            ul.errors id=[(!id.is_empty()).then_some(id)] {
                @for (field, message) in errors {
                    li { @if !field.is_empty() { code { (field) } ": " } (message) }
                }
            }
        }
    }
}

/// A notice after a change that succeeded (`done` in the query names it; nothing the query
/// says is shown as it is).
pub(crate) fn notice(text: Option<&str>) -> Markup {
    html! {
        @if let Some(text) = text {
            p.notice role="status" { (text) }
        }
    }
}

/// Text as given, in a `pre` (JSON shown back).
pub(crate) fn pre(text: &str) -> Markup {
    html! { pre { (text) } }
}

/// A page that could not be read: to the sign-in page when the session's key may not use the
/// environment (the API's 401), else the API's message with its status.
pub(crate) fn unreadable(err: DomainError, title: &str) -> Result<HttpResponse, Refusal> {
    let problems = Problems::of(err);
    if problems.status == StatusCode::UNAUTHORIZED {
        return Err(Refusal::SignIn { expired: false });
    }
    Ok(message(problems.status, title, &problems.message))
}

/// The query of a page shown after a change: `done` names the change (its notice is the
/// page's own text; nothing of the query is shown as it is).
#[derive(serde::Deserialize)]
pub(crate) struct Done {
    pub(crate) done: Option<String>,
}

/// Links between the pages of a list: to its next page when there is one (`next`, the key of
/// this page's last item, as `param`), and back to its first when this is a later one. `query`
/// is the list's other parameters (its filters), kept.
pub(crate) fn pages(
    path: &str,
    query: &[(&str, &str)],
    param: &str,
    this: Option<&str>,
    next: Option<&str>,
) -> Markup {
    let with = |after: Option<&str>| {
        let mut pairs: Vec<(&str, &str)> = query
            .iter()
            .filter(|(k, v)| *k != param && !v.is_empty())
            .copied()
            .collect();
        if let Some(after) = after {
            pairs.push((param, after));
        }
        let encoded = serde_urlencoded::to_string(&pairs).unwrap_or_default();
        if encoded.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{encoded}")
        }
    };
    html! {
        @if this.is_some() || next.is_some() {
            nav.actions aria-label="Pages" {
                @if this.is_some() { a href=(with(None)) { "First page" } }
                @if let Some(next) = next { a rel="next" href=(with(Some(next))) { "Next page" } }
            }
        }
    }
}

/// A list's query value (or a form's id) as storage may be given it: none when empty; a value
/// with a control character is refused, as the API refuses it in a path (a NUL, say, is no text
/// PostgreSQL takes).
pub(crate) fn query_value(value: Option<&str>, name: &str) -> Result<Option<String>, Refusal> {
    match value.filter(|v| !v.is_empty()) {
        Some(v) if v.chars().any(char::is_control) => Err(Refusal::BadForm(format!(
            "`{name}` has a control character"
        ))),
        other => Ok(other.map(str::to_owned)),
    }
}
