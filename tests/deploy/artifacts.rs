//! The deployment artifacts read into one shape: the processes they start (the binary's
//! arguments and the `WORKBENCH_*` variables it is given), beside the parsed files themselves
//! for the checks that need more.

use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of a YAML file.
pub fn yaml(path: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

/// A setting's value as an artifact gives it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Written in the artifact.
    Literal(String),
    /// Given when it is deployed (a Kubernetes Secret, a variable Compose interpolates): the
    /// text says where from.
    Provided(String),
}

/// A process an artifact starts.
#[derive(Clone, Debug)]
pub struct Process {
    /// Where it is declared, for messages: `deploy/compose.yaml: services.migrate`.
    pub origin: String,
    /// The binary's arguments.
    pub args: Vec<String>,
    /// Its `WORKBENCH_*` variables in the order they are set: a later one overrides.
    pub env: Vec<(String, Value)>,
}

impl Process {
    pub fn setting(&self, name: &str) -> Option<&Value> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    pub fn literal(&self, name: &str) -> Option<&str> {
        match self.setting(name)? {
            Value::Literal(text) => Some(text),
            Value::Provided(_) => None,
        }
    }

    /// Whether it serves: `serve`, or no subcommand (serve is the default).
    pub fn serves(&self) -> bool {
        self.args.first().is_none_or(|a| a == "serve")
    }
}

/// The runtime (last) stage of the Containerfile.
#[derive(Debug, Default)]
pub struct Image {
    pub user: String,
    pub env: Vec<(String, Value)>,
    pub expose: Vec<u16>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub volumes: Vec<String>,
    pub workdir: String,
}

impl Image {
    pub fn read() -> Image {
        let text = read("Containerfile");
        // Continuation lines joined, comments and blank lines left out.
        let mut instructions = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(head) => {
                    current.push_str(head);
                    current.push(' ');
                }
                None => {
                    current.push_str(trimmed);
                    instructions.push(std::mem::take(&mut current));
                }
            }
        }
        let mut image = Image::default();
        for instruction in instructions {
            let (keyword, rest) = instruction
                .split_once(char::is_whitespace)
                .unwrap_or((instruction.as_str(), ""));
            let rest = rest.trim();
            match keyword.to_ascii_uppercase().as_str() {
                "FROM" => image = Image::default(),
                "USER" => image.user = rest.to_owned(),
                "WORKDIR" => image.workdir = rest.to_owned(),
                "ENV" => {
                    for pair in rest.split_whitespace() {
                        let (k, v) = pair
                            .split_once('=')
                            .unwrap_or_else(|| panic!("Containerfile: ENV {pair}: not NAME=value"));
                        image
                            .env
                            .push((k.to_owned(), Value::Literal(v.trim_matches('"').to_owned())));
                    }
                }
                "EXPOSE" => image.expose.extend(rest.split_whitespace().map(|p| {
                    p.trim_end_matches("/tcp")
                        .parse::<u16>()
                        .unwrap_or_else(|e| panic!("Containerfile: EXPOSE {p}: {e}"))
                })),
                "ENTRYPOINT" => image.entrypoint = exec_form("ENTRYPOINT", rest),
                "CMD" => image.cmd = exec_form("CMD", rest),
                "VOLUME" => image.volumes = exec_form("VOLUME", rest),
                _ => {}
            }
        }
        image
    }

    /// The binary every container of the image runs.
    pub fn binary(&self) -> &str {
        assert_eq!(
            self.entrypoint.len(),
            1,
            "Containerfile: the ENTRYPOINT is the binary alone, so that a command given to the \
             container is the binary's arguments"
        );
        &self.entrypoint[0]
    }

    /// A container of this image: `args` (the image's CMD when None) and the image's
    /// variables, then `env`.
    pub fn process(
        &self,
        origin: String,
        args: Option<Vec<String>>,
        env: Vec<(String, Value)>,
    ) -> Process {
        Process {
            origin,
            args: args.unwrap_or_else(|| self.cmd.clone()),
            env: self.env.iter().cloned().chain(env).collect(),
        }
    }

    /// The uid the image runs as.
    pub fn uid(&self) -> i64 {
        let uid = self.user.split(':').next().unwrap_or_default();
        uid.parse().unwrap_or_else(|_| {
            panic!(
                "Containerfile: USER `{}` must be numeric, so that Kubernetes can tell it is not \
                 root (runAsNonRoot)",
                self.user
            )
        })
    }
}

/// `["a", "b"]` (the exec form, never a shell: the image has none).
fn exec_form(keyword: &str, text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| {
        panic!("Containerfile: {keyword} {text}: the exec form (a JSON array) is needed: {e}")
    })
}

/// Strings of a YAML sequence.
pub fn strings(yaml: &Yaml, what: &str) -> Vec<String> {
    yaml.as_vec()
        .unwrap_or_else(|| panic!("{what}: not a list"))
        .iter()
        .map(|item| scalar(item).unwrap_or_else(|| panic!("{what}: {item:?} is not text")))
        .collect()
}

/// A scalar as text (numbers and booleans as written).
pub fn scalar(yaml: &Yaml) -> Option<String> {
    match yaml {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Compose's interpolation of a value: `${NAME:-default}` alone is its default; anything else
/// naming a variable is provided when deployed; `$$` is a `$`.
pub fn interpolate(value: &str) -> Value {
    let whole = value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .filter(|inner| !inner.contains('$') && !inner.contains('}'));
    if let Some((_, default)) = whole.and_then(|inner| inner.split_once(":-")) {
        return Value::Literal(default.to_owned());
    }
    if value.replace("$$", "").contains('$') {
        return Value::Provided(format!("a variable Compose interpolates into `{value}`"));
    }
    Value::Literal(value.replace("$$", "$"))
}

/// Compose's and systemd's durations (`45s`, `1m30s`, `2min`; a bare number is seconds), in
/// seconds.
pub fn seconds(text: &str) -> u64 {
    let mut total = 0;
    let mut number = String::new();
    let mut unit = String::new();
    let mut flush = |number: &mut String, unit: &mut String| {
        if number.is_empty() {
            return;
        }
        let n: u64 = number.parse().unwrap_or_else(|e| panic!("`{text}`: {e}"));
        total += n * match unit.as_str() {
            "" | "s" | "sec" => 1,
            "m" | "min" => 60,
            "h" => 3600,
            other => panic!("`{text}`: unit `{other}` not known here"),
        };
        number.clear();
        unit.clear();
    };
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            if !unit.is_empty() {
                flush(&mut number, &mut unit);
            }
            number.push(c);
        } else if !c.is_whitespace() {
            unit.push(c);
        }
    }
    flush(&mut number, &mut unit);
    total
}

/// The `[Service]` lines of a systemd unit, in order, as (key, value).
pub fn unit_service(path: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut lines = Vec::new();
    for line in read(path).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_owned();
        } else if section == "[Service]" {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("{path}: `{line}` is not Key=value"));
            lines.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    lines
}

/// `NAME=value` lines of an environment file (comments and blank lines left out).
pub fn environment_file(path: &str) -> Vec<(String, Value)> {
    read(path)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (k, v) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("{path}: `{line}` is not NAME=value"));
            (k.to_owned(), Value::Literal(v.to_owned()))
        })
        .collect()
}
