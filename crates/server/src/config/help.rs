//! What the operator is told about the settings: the setting a misspelt variable most likely
//! meant, and the list `serve --help` shows, from docs/configuration.md.

use figment::value::{Dict, Value};
use figment::Figment;

use super::raw::{Environment, Raw};
use super::sources::variable;

/// Every setting's variable, as [`Raw`] knows them (serde names a struct's fields in the error
/// for an unknown one).
pub(super) fn known_variables() -> Vec<String> {
    let probe: Dict = [("-".to_owned(), Value::from("-"))].into_iter().collect();
    let Err(error) = Figment::from(Environment(probe)).extract::<Raw>() else {
        return Vec::new();
    };
    error
        .into_iter()
        .find_map(|e| match e.kind {
            figment::error::Kind::UnknownField(_, expected) => Some(expected),
            _ => None,
        })
        .unwrap_or_default()
        .iter()
        .map(|key| variable(key))
        .collect()
}

/// The setting `variable` was most likely meant to be: the known variable fewest edits away,
/// if it is close (at most a third of its length).
pub fn closest_setting(variable: &str) -> Option<String> {
    known_variables()
        .into_iter()
        .map(|known| (strsim::levenshtein(variable, &known), known))
        .filter(|(edits, _)| *edits > 0 && *edits <= (variable.len() / 3).max(1))
        .min()
        .map(|(_, known)| known)
}

/// The settings table of docs/configuration.md, compiled in: `serve --help` shows it.
const CONFIGURATION_DOC: &str = include_str!("../../../../docs/configuration.md");

/// Every setting as `serve --help` lists it: variable, default and meaning, one block each,
/// from the table of docs/configuration.md.
pub fn settings_help() -> String {
    let mut help = String::from(
        "Settings (environment variables; a TOML file given with --config sets the same keys; \
         docs/configuration.md has them all):\n",
    );
    for line in CONFIGURATION_DOC.lines() {
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches(['|', ' ']))
            .collect();
        let [variable, _key, default, meaning] = cells.as_slice() else {
            continue;
        };
        if !variable.starts_with("`WORKBENCH_") {
            continue;
        }
        let plain = |text: &str| text.replace('`', "");
        help.push_str(&format!(
            "\n  {}  [default: {}]\n      {}\n",
            plain(variable),
            plain(default),
            plain(meaning)
        ));
    }
    help
}
