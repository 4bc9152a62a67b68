//! The deployment artifacts checked against the binary they deploy, so that they cannot drift
//! from it: the `Containerfile`, `deploy/compose.yaml`, `deploy/workbench.service` (with
//! `deploy/workbench.env`) and `deploy/kubernetes/`.
//!
//! Their ports are checked against the address the binary listens on, their probes against
//! the routes that answer them, their grace periods against its drain delay and shutdown
//! timeout, and their commands and `WORKBENCH_*` variables against the binary itself: the
//! settings each process is given are read by `workbench config check` (no unknown variable,
//! no refused value), and each process is run with exactly those variables (on a temporary
//! SQLite file and a free port): it must log no "not a setting" warning, reach `/readyz` 200,
//! pass its health check and exit 0 on SIGTERM within the time the artifact allows.

mod artifacts;
mod run;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use artifacts::{Image, Process, Value};
use base64::Engine as _;
use yaml_rust2::Yaml;

const COMPOSE: &str = "deploy/compose.yaml";
const UNIT: &str = "deploy/workbench.service";
const UNIT_ENV: &str = "deploy/workbench.env";
const KUBERNETES: &str = "deploy/kubernetes";

// ---- reading the artifacts ----

fn compose() -> Yaml {
    artifacts::yaml(COMPOSE).remove(0)
}

/// Whether an image reference names this project's image (`…/workbench:tag`).
fn ours(reference: &Yaml) -> bool {
    let Some(Value::Literal(reference)) =
        artifacts::scalar(reference).map(|r| artifacts::interpolate(&r))
    else {
        return false;
    };
    let name = reference.rsplit('/').next().unwrap_or_default();
    name.split([':', '@']).next() == Some("workbench")
}

/// The Compose services that run the image, with the process each starts.
fn compose_services(image: &Image, compose: &Yaml) -> Vec<(String, Process)> {
    let services = compose["services"].as_hash().expect("compose: services");
    services
        .iter()
        .filter(|(_, service)| ours(&service["image"]))
        .map(|(name, service)| {
            let name = name.as_str().expect("service name").to_owned();
            let origin = format!("{COMPOSE}: services.{name}");
            assert!(
                service["entrypoint"].is_badvalue(),
                "{origin}: the image's entrypoint is the binary; give `command` only"
            );
            let args = (!service["command"].is_badvalue())
                .then(|| artifacts::strings(&service["command"], &origin));
            let mut env = Vec::new();
            match &service["environment"] {
                Yaml::Hash(map) => {
                    for (k, v) in map {
                        let k = k.as_str().expect("variable name").to_owned();
                        let v = artifacts::scalar(v).unwrap_or_default();
                        env.push((k, artifacts::interpolate(&v)));
                    }
                }
                Yaml::Array(list) => {
                    for item in list {
                        let item = item.as_str().expect("NAME=value");
                        let (k, v) = item.split_once('=').unwrap_or((item, ""));
                        env.push((k.to_owned(), artifacts::interpolate(v)));
                    }
                }
                _ => {}
            }
            let process = image.process(origin, args, env);
            (name, process)
        })
        .collect()
}

/// Every document of every manifest, with its file.
fn manifests() -> Vec<(String, Yaml)> {
    let mut files: Vec<_> = std::fs::read_dir(artifacts::root().join(KUBERNETES))
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|file| {
            let path = format!("{KUBERNETES}/{file}");
            artifacts::yaml(&path)
                .into_iter()
                .filter(|doc| !doc.is_null())
                .map(move |doc| (path.clone(), doc))
        })
        .collect()
}

fn of_kind<'a>(manifests: &'a [(String, Yaml)], kind: &str) -> Vec<(&'a str, &'a Yaml)> {
    manifests
        .iter()
        .filter(|(_, doc)| doc["kind"].as_str() == Some(kind))
        .map(|(file, doc)| (file.as_str(), doc))
        .collect()
}

fn only<'a>(manifests: &'a [(String, Yaml)], kind: &str) -> (&'a str, &'a Yaml) {
    let found = of_kind(manifests, kind);
    assert_eq!(found.len(), 1, "{KUBERNETES}: one {kind} expected");
    found[0]
}

/// The pod template of a workload.
fn pod(workload: &Yaml) -> &Yaml {
    &workload["spec"]["template"]
}

/// A container of the image, as a process.
fn container_process(image: &Image, origin: &str, container: &Yaml) -> Process {
    let origin = format!(
        "{origin}: container {}",
        container["name"].as_str().unwrap_or("?")
    );
    assert!(
        ours(&container["image"]),
        "{origin}: runs {:?}, not the workbench image",
        container["image"]
    );
    if !container["command"].is_badvalue() {
        let command = artifacts::strings(&container["command"], &origin);
        assert_eq!(
            command,
            [image.binary()],
            "{origin}: `command` replaces the image's entrypoint; give `args` only"
        );
    }
    let args =
        (!container["args"].is_badvalue()).then(|| artifacts::strings(&container["args"], &origin));
    let mut env = Vec::new();
    for item in container["env"].as_vec().into_iter().flatten() {
        let name = item["name"].as_str().expect("env name").to_owned();
        let value = if let Some(value) = artifacts::scalar(&item["value"]) {
            Value::Literal(value)
        } else {
            let secret = &item["valueFrom"]["secretKeyRef"];
            Value::Provided(format!(
                "from the Secret `{}` key `{}`",
                secret["name"].as_str().unwrap_or("?"),
                secret["key"].as_str().unwrap_or("?")
            ))
        };
        env.push((name, value));
    }
    assert!(
        container["envFrom"].is_badvalue(),
        "{origin}: name each variable (`env`), so that they can be checked"
    );
    image.process(origin, args, env)
}

/// The containers of a workload, with their processes.
fn containers<'a>(image: &Image, file: &str, workload: &'a Yaml) -> Vec<(&'a Yaml, Process)> {
    let origin = format!(
        "{file}: {} {}",
        workload["kind"].as_str().unwrap_or("?"),
        workload["metadata"]["name"].as_str().unwrap_or("?")
    );
    pod(workload)["spec"]["containers"]
        .as_vec()
        .unwrap_or_else(|| panic!("{origin}: no containers"))
        .iter()
        .map(|c| (c, container_process(image, &origin, c)))
        .collect()
}

/// The unit's settings and its `ExecStartPre` and `ExecStart` processes.
fn unit() -> (Vec<(String, String)>, Vec<Process>) {
    let lines = artifacts::unit_service(UNIT);
    let mut env = Vec::new();
    for (key, value) in &lines {
        if key == "Environment" {
            for assignment in value.split_whitespace() {
                let (k, v) = assignment
                    .trim_matches('"')
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{UNIT}: Environment={value}"));
                env.push((k.to_owned(), Value::Literal(v.to_owned())));
            }
        }
    }
    let files: Vec<_> = lines
        .iter()
        .filter(|(k, _)| k == "EnvironmentFile")
        .collect();
    assert_eq!(
        files.len(),
        1,
        "{UNIT}: one EnvironmentFile, whose example is {UNIT_ENV}"
    );
    // Read after every Environment= line, whatever their order: systemd's rule.
    env.extend(artifacts::environment_file(UNIT_ENV));
    let processes = lines
        .iter()
        .filter(|(k, _)| k == "ExecStartPre" || k == "ExecStart")
        .map(|(key, command)| {
            let mut words = command.split_whitespace().map(str::to_owned);
            let binary = words.next().unwrap_or_default();
            let binary = binary.trim_start_matches(['-', '+', '!', '@', ':']);
            assert!(
                binary.starts_with('/') && binary.ends_with("/workbench"),
                "{UNIT}: {key} runs `{binary}`, not the workbench binary"
            );
            Process {
                origin: format!("{UNIT}: {key}"),
                args: words.collect(),
                env: env.clone(),
            }
        })
        .collect();
    (lines, processes)
}

fn unit_setting<'a>(lines: &'a [(String, String)], key: &str) -> Option<&'a str> {
    lines
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The address a process listens on, as the binary reads its settings.
fn listen_address(process: &Process) -> SocketAddr {
    let effective = run::effective(process);
    let listen = effective["listen"].as_str().unwrap_or_default();
    listen
        .parse()
        .unwrap_or_else(|e| panic!("{}: listen `{listen}`: {e}", process.origin))
}

/// Drain delay and shutdown timeout of a process together, in seconds, as the binary reads
/// its settings.
fn stop_budget(process: &Process) -> u64 {
    let effective = run::effective(process);
    ["shutdown_drain_seconds", "shutdown_timeout_seconds"]
        .iter()
        .map(|key| {
            effective[*key]
                .as_u64()
                .unwrap_or_else(|| panic!("{}: `config check` printed no {key}", process.origin))
        })
        .sum()
}

/// Every process the artifacts start: the image's default, Compose's services and health
/// checks, the Kubernetes workloads' containers, the systemd unit's commands.
fn processes(image: &Image) -> Vec<Process> {
    let mut all = vec![image.process("Containerfile".into(), None, Vec::new())];
    let compose = compose();
    for (name, process) in compose_services(image, &compose) {
        let test = &compose["services"][name.as_str()]["healthcheck"]["test"];
        if !test.is_badvalue() {
            all.push(health_check(image, &process, test));
        }
        all.push(process);
    }
    let manifests = manifests();
    for kind in ["Deployment", "Job"] {
        for (file, workload) in of_kind(&manifests, kind) {
            all.extend(
                containers(image, file, workload)
                    .into_iter()
                    .map(|(_, p)| p),
            );
        }
    }
    all.extend(unit().1);
    all
}

/// A Compose health check (`["CMD", binary, args...]`) as a process of its service.
fn health_check(image: &Image, service: &Process, test: &Yaml) -> Process {
    let test = artifacts::strings(test, &service.origin);
    assert!(
        test.len() >= 2 && test[0] == "CMD" && test[1] == image.binary(),
        "{}: the health check runs the binary in exec form ([\"CMD\", \"{}\", ...]): the \
         image has no shell",
        service.origin,
        image.binary()
    );
    Process {
        origin: format!("{}.healthcheck", service.origin),
        args: test[2..].to_vec(),
        env: service.env.clone(),
    }
}

fn is_migrate(process: &Process) -> bool {
    process.args.first().is_some_and(|a| a == "migrate")
}

/// `matchLabels` (or a Service's plain selector) as pairs.
fn labels(yaml: &Yaml) -> BTreeMap<String, String> {
    yaml.as_hash()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (
                k.as_str().unwrap_or_default().to_owned(),
                artifacts::scalar(v).unwrap_or_default(),
            )
        })
        .collect()
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

// ---- running them ----

/// Runs a migration as the artifact does.
fn check_migrate(sandbox: &run::Sandbox, process: &Process) {
    run::assert_known(process, &process.args);
    let done = sandbox.run(process, &process.args, "127.0.0.1:0");
    assert!(
        done.status.success(),
        "{}: `workbench {}` failed ({}):\n{}",
        process.origin,
        process.args.join(" "),
        done.status,
        done.stderr
    );
    let warned = run::not_settings(&done.stderr);
    assert!(
        warned.is_empty(),
        "{}: sets variables the binary does not know:\n{}",
        process.origin,
        warned.join("\n")
    );
    serde_json::from_str::<serde_json::Value>(&done.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: `migrate` printed no JSON ({e}): {}",
            process.origin, done.stdout
        )
    });
}

/// Serves as the artifact does until `/readyz` answers 200, asks each of its probe paths and
/// runs each of its health checks, then stops it with SIGTERM within `grace`.
fn check_serve(
    sandbox: &run::Sandbox,
    process: &Process,
    paths: &[String],
    health_checks: &[Process],
    grace: Duration,
) {
    assert!(
        process.serves(),
        "{}: `{}` is not serve",
        process.origin,
        process.args.join(" ")
    );
    run::assert_known(process, &process.args);
    let mut server = sandbox.serve(process, &process.args);
    server.wait_ready(&process.origin);
    let warned = run::not_settings(&server.logs());
    assert!(
        warned.is_empty(),
        "{}: sets variables the binary does not know:\n{}",
        process.origin,
        warned.join("\n")
    );
    for path in paths {
        assert_eq!(
            run::get(server.address(), path),
            Some(200),
            "{}: its probe asks {path}, which does not answer 200 on a ready server",
            process.origin
        );
    }
    for check in health_checks {
        run::assert_known(check, &check.args);
        let done = sandbox.run(check, &check.args, &server.address().to_string());
        assert!(
            done.status.success(),
            "{}: `workbench {}` failed on a ready server ({}): {}{}",
            check.origin,
            check.args.join(" "),
            done.status,
            done.stdout,
            done.stderr
        );
    }
    let status = server.stop(&process.origin, grace);
    assert!(
        status.success(),
        "{}: exit {status} after SIGTERM:\n{}",
        process.origin,
        server.logs()
    );
}

// ---- the checks ----

#[test]
fn every_setting_an_artifact_gives_is_one_the_binary_knows_and_accepts() {
    // `config check` reads exactly the variables an artifact sets, as written, and refuses a
    // bad value; a misspelt name is only a warning at start, so it is looked for here.
    let image = Image::read();
    for process in processes(&image) {
        let effective = run::effective(&process);
        assert_eq!(
            effective["unknown_variables"],
            serde_json::json!([]),
            "{}: sets variables that are not settings",
            process.origin
        );
    }
}

#[test]
fn a_container_listens_where_its_port_is_published() {
    let image = Image::read();
    let default = image.process("Containerfile".into(), None, Vec::new());
    let listen = listen_address(&default);
    assert!(
        listen.ip().is_unspecified(),
        "Containerfile: WORKBENCH_LISTEN {listen} is unreachable from outside the container; \
         listen on 0.0.0.0"
    );
    assert_eq!(
        image.expose,
        [listen.port()],
        "Containerfile: EXPOSE is the port of WORKBENCH_LISTEN"
    );

    let compose = compose();
    for (name, process) in compose_services(&image, &compose) {
        let listen = listen_address(&process);
        assert!(
            listen.ip().is_unspecified(),
            "{}: listens on {listen}, unreachable from outside its container",
            process.origin
        );
        for port in compose["services"][name.as_str()]["ports"]
            .as_vec()
            .into_iter()
            .flatten()
        {
            let port = artifacts::scalar(port).expect("port");
            let target = port.rsplit(':').next().unwrap_or_default();
            assert_eq!(
                target.trim_end_matches("/tcp"),
                listen.port().to_string(),
                "{}: publishes `{port}`, but serves on {listen}",
                process.origin
            );
        }
    }

    let manifests = manifests();
    let (file, deployment) = only(&manifests, "Deployment");
    let mut named = BTreeMap::new();
    for (container, process) in containers(&image, file, deployment) {
        let listen = listen_address(&process);
        assert!(
            listen.ip().is_unspecified(),
            "{}: listens on {listen}, unreachable from outside the pod",
            process.origin
        );
        let ports = container["ports"].as_vec().expect("ports");
        assert!(
            ports
                .iter()
                .any(|p| p["containerPort"].as_i64() == Some(i64::from(listen.port()))),
            "{}: no containerPort {}, the port it serves on",
            process.origin,
            listen.port()
        );
        for port in ports {
            if let Some(name) = port["name"].as_str() {
                named.insert(name.to_owned(), port["containerPort"].as_i64());
            }
        }
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let port = &container[probe]["httpGet"]["port"];
            let number = match port {
                Yaml::String(name) => named.get(name).copied().flatten(),
                other => other.as_i64(),
            };
            assert_eq!(
                number,
                Some(i64::from(listen.port())),
                "{}: {probe} asks port {port:?}, not the port it serves on",
                process.origin
            );
        }
    }
    let (file, service) = only(&manifests, "Service");
    for port in service["spec"]["ports"].as_vec().expect("ports") {
        let target = &port["targetPort"];
        let number = match target {
            Yaml::String(name) => named.get(name).copied().flatten(),
            other => other.as_i64(),
        };
        assert!(
            number == Some(i64::from(listen_address(&default).port())),
            "{file}: targetPort {target:?} is not a port the pods serve on"
        );
    }
}

#[test]
fn probes_ask_the_routes_that_say_ready_and_alive() {
    // A liveness probe on /readyz would restart every pod when the database is away, and a
    // readiness probe on /healthz would send traffic to a replica that cannot serve it.
    let image = Image::read();
    let manifests = manifests();
    let (file, deployment) = only(&manifests, "Deployment");
    for (container, process) in containers(&image, file, deployment) {
        for (probe, path) in [
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/healthz"),
            ("startupProbe", "/healthz"),
        ] {
            assert_eq!(
                container[probe]["httpGet"]["path"].as_str(),
                Some(path),
                "{}: {probe} must ask {path}",
                process.origin
            );
        }
    }
    let compose = compose();
    for (name, process) in compose_services(&image, &compose) {
        if !process.serves() {
            continue;
        }
        let test = artifacts::strings(
            &compose["services"][name.as_str()]["healthcheck"]["test"],
            &process.origin,
        );
        assert_eq!(
            test,
            ["CMD", image.binary(), "probe", "/readyz"],
            "{}: the health check asks the binary for /readyz (the image has no shell)",
            process.origin
        );
    }
}

#[test]
fn a_stop_lets_the_drain_and_in_flight_requests_finish_before_the_kill() {
    let image = Image::read();
    let compose = compose();
    for (name, process) in compose_services(&image, &compose) {
        if !process.serves() {
            continue;
        }
        // Compose's default is 10 s.
        let grace = artifacts::scalar(&compose["services"][name.as_str()]["stop_grace_period"])
            .map_or(10, |g| artifacts::seconds(&g));
        assert!(
            grace > stop_budget(&process),
            "{}: stop_grace_period {grace} s is not longer than the drain delay and the \
             shutdown timeout ({} s)",
            process.origin,
            stop_budget(&process)
        );
    }
    let manifests = manifests();
    let (file, deployment) = only(&manifests, "Deployment");
    // Kubernetes's default is 30 s.
    let grace = pod(deployment)["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    for (container, process) in containers(&image, file, deployment) {
        let readiness = &container["readinessProbe"];
        // Kubernetes's defaults: every 10 s, 3 failures.
        let noticed = readiness["periodSeconds"].as_i64().unwrap_or(10)
            * readiness["failureThreshold"].as_i64().unwrap_or(3);
        let drain = run::effective(&process)["shutdown_drain_seconds"]
            .as_i64()
            .unwrap_or_default();
        assert!(
            noticed <= drain,
            "{}: the readiness probe needs {noticed} s to see a stopping pod fail, longer than \
             the drain delay ({drain} s) before its listener closes",
            process.origin
        );
        assert!(
            u64::try_from(grace).unwrap_or(0) > stop_budget(&process),
            "{}: terminationGracePeriodSeconds {grace} is not longer than the drain delay and \
             the shutdown timeout ({} s)",
            process.origin,
            stop_budget(&process)
        );
    }
    let (lines, processes) = unit();
    // systemd's default is 90 s.
    let grace = unit_setting(&lines, "TimeoutStopSec").map_or(90, artifacts::seconds);
    for process in processes.iter().filter(|p| p.serves()) {
        assert!(
            grace > stop_budget(process),
            "{UNIT}: TimeoutStopSec {grace} s is not longer than the drain delay and the \
             shutdown timeout ({} s)",
            stop_budget(process)
        );
    }
}

#[test]
fn nothing_runs_as_root_or_writes_outside_its_data_directory() {
    let image = Image::read();
    assert_ne!(image.uid(), 0, "Containerfile: the image runs as root");
    let default = image.process("Containerfile".into(), None, Vec::new());
    let data = default
        .literal("WORKBENCH_DATA_DIR")
        .expect("Containerfile: ENV WORKBENCH_DATA_DIR")
        .to_owned();
    assert_eq!(
        image.volumes,
        std::slice::from_ref(&data),
        "Containerfile: the data directory is the volume"
    );
    let database = default
        .literal("WORKBENCH_DATABASE_URL")
        .expect("Containerfile: ENV WORKBENCH_DATABASE_URL");
    assert!(
        database.starts_with(&format!("sqlite://{data}/")),
        "Containerfile: the SQLite database {database} is not in the volume {data}"
    );

    let compose = compose();
    for (name, process) in compose_services(&image, &compose) {
        let service = &compose["services"][name.as_str()];
        assert_eq!(
            service["read_only"].as_bool(),
            Some(true),
            "{}: read_only: true",
            process.origin
        );
        assert!(
            service["user"].is_badvalue(),
            "{}: runs as the image's user",
            process.origin
        );
        let mounted = service["volumes"].as_vec().into_iter().flatten().any(|v| {
            artifacts::scalar(v).is_some_and(|v| v.split(':').nth(1) == Some(data.as_str()))
        });
        assert!(
            mounted,
            "{}: the root file system is read-only and no volume is at {data}, its data \
             directory",
            process.origin
        );
    }

    let manifests = manifests();
    for kind in ["Deployment", "Job"] {
        for (file, workload) in of_kind(&manifests, kind) {
            let spec = &pod(workload)["spec"];
            let security = &spec["securityContext"];
            assert_eq!(
                security["runAsNonRoot"].as_bool(),
                Some(true),
                "{file}: runAsNonRoot"
            );
            if let Some(uid) = security["runAsUser"].as_i64() {
                assert_eq!(uid, image.uid(), "{file}: runAsUser is the image's user");
            }
            for (container, process) in containers(&image, file, workload) {
                let security = &container["securityContext"];
                assert_eq!(
                    security["readOnlyRootFilesystem"].as_bool(),
                    Some(true),
                    "{}: readOnlyRootFilesystem",
                    process.origin
                );
                assert_eq!(
                    security["allowPrivilegeEscalation"].as_bool(),
                    Some(false),
                    "{}: allowPrivilegeEscalation: false",
                    process.origin
                );
                let dropped =
                    artifacts::strings(&security["capabilities"]["drop"], &process.origin);
                assert_eq!(
                    dropped,
                    ["ALL"],
                    "{}: drop every capability",
                    process.origin
                );
                let mounted = container["volumeMounts"]
                    .as_vec()
                    .into_iter()
                    .flatten()
                    .any(|m| m["mountPath"].as_str() == Some(data.as_str()));
                assert!(
                    mounted,
                    "{}: the root file system is read-only and nothing is mounted at {data}, its \
                     data directory",
                    process.origin
                );
            }
        }
    }

    let (lines, processes) = unit();
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
    ] {
        assert_eq!(
            unit_setting(&lines, key),
            Some(value),
            "{UNIT}: {key}={value}"
        );
    }
    let state = unit_setting(&lines, "StateDirectory").expect("StateDirectory");
    let state = format!("/var/lib/{state}");
    for process in &processes {
        let database = process
            .literal("WORKBENCH_DATABASE_URL")
            .expect("WORKBENCH_DATABASE_URL");
        assert!(
            database.starts_with(&format!("sqlite://{state}/")),
            "{}: the SQLite database {database} is outside the state directory {state}, the \
             only place it may write",
            process.origin
        );
        assert_eq!(
            process.literal("WORKBENCH_DATA_DIR"),
            Some(state.as_str()),
            "{}: the data directory is the state directory",
            process.origin
        );
    }
}

#[test]
fn replicas_wait_for_the_migration_of_their_own_version_and_never_migrate() {
    let image = Image::read();
    let compose = compose();
    let services = compose_services(&image, &compose);
    let migrations: Vec<_> = services.iter().filter(|(_, p)| is_migrate(p)).collect();
    assert_eq!(migrations.len(), 1, "{COMPOSE}: one `migrate` service");
    let (migrate, migration) = migrations[0];
    assert_eq!(
        compose["services"][migrate.as_str()]["restart"].as_str(),
        Some("no"),
        "{}: a one-shot service",
        migration.origin
    );
    let servers: Vec<_> = services.iter().filter(|(_, p)| p.serves()).collect();
    let replicas: i64 = servers
        .iter()
        .map(|(name, _)| {
            compose["services"][name.as_str()]["deploy"]["replicas"]
                .as_i64()
                .unwrap_or(1)
        })
        .sum();
    assert_eq!(replicas, 2, "{COMPOSE}: two replicas");
    for (name, process) in &servers {
        let service = &compose["services"][name.as_str()];
        assert_eq!(
            service["image"],
            compose["services"][migrate.as_str()]["image"],
            "{}: runs another image than the migration",
            process.origin
        );
        assert_eq!(
            service["depends_on"][migrate.as_str()]["condition"].as_str(),
            Some("service_completed_successfully"),
            "{}: starts before the migration succeeded",
            process.origin
        );
        assert!(
            process.args.iter().any(|a| a == "--no-migrate"),
            "{}: a replica must not migrate (serve --no-migrate)",
            process.origin
        );
        assert!(
            !service["healthcheck"].is_badvalue(),
            "{}: no health check",
            process.origin
        );
    }

    let manifests = manifests();
    let (file, deployment) = only(&manifests, "Deployment");
    let (job_file, job) = only(&manifests, "Job");
    let job_containers = containers(&image, job_file, job);
    assert!(
        job_containers.iter().all(|(_, p)| is_migrate(p)),
        "{job_file}: the Job runs `migrate`"
    );
    for (container, process) in containers(&image, file, deployment) {
        assert!(
            process.args.iter().any(|a| a == "--no-migrate"),
            "{}: a replica must not migrate (serve --no-migrate)",
            process.origin
        );
        for (job_container, _) in &job_containers {
            assert_eq!(
                container["image"], job_container["image"],
                "{}: the Job migrates another image than the Deployment runs",
                process.origin
            );
        }
    }

    let (_, processes) = unit();
    let order: Vec<_> = processes
        .iter()
        .map(|p| {
            (
                p.origin.rsplit(": ").next().unwrap_or_default(),
                p.args.clone(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("ExecStartPre", vec!["migrate".to_owned()]),
            (
                "ExecStart",
                vec!["serve".to_owned(), "--no-migrate".to_owned()]
            ),
        ],
        "{UNIT}: migrate, then serve without migrating"
    );
}

#[test]
fn selectors_pick_the_servers_and_nothing_else() {
    let manifests = manifests();
    let (file, deployment) = only(&manifests, "Deployment");
    let servers = labels(&pod(deployment)["metadata"]["labels"]);
    assert!(
        selects(
            &labels(&deployment["spec"]["selector"]["matchLabels"]),
            &servers
        ),
        "{file}: the selector does not match the pod template's labels"
    );
    let (_, job) = only(&manifests, "Job");
    let migration = labels(&pod(job)["metadata"]["labels"]);
    let (file, service) = only(&manifests, "Service");
    let (pdb_file, pdb) = only(&manifests, "PodDisruptionBudget");
    for (file, selector) in [
        (file, labels(&service["spec"]["selector"])),
        (pdb_file, labels(&pdb["spec"]["selector"]["matchLabels"])),
    ] {
        assert!(
            selects(&selector, &servers),
            "{file}: does not select the Deployment's pods"
        );
        assert!(
            !selects(&selector, &migration),
            "{file}: selects the migration's pod too"
        );
    }
    assert_eq!(
        deployment["spec"]["replicas"].as_i64(),
        Some(2),
        "{file}: two replicas"
    );
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as_i64(),
        Some(0),
        "{file}: a roll never takes a ready replica away before its successor is ready"
    );
    let kustomization = only(&manifests, "Kustomization").1;
    for resource in artifacts::strings(&kustomization["resources"], "kustomization.yaml") {
        assert!(
            artifacts::root().join(KUBERNETES).join(&resource).is_file(),
            "{KUBERNETES}/kustomization.yaml: {resource} does not exist"
        );
    }
}

#[test]
fn no_artifact_holds_a_usable_secret() {
    let image = Image::read();
    let manifests = manifests();
    let processes = processes(&image);
    let mut refs = Vec::new();
    for kind in ["Deployment", "Job"] {
        for (file, workload) in of_kind(&manifests, kind) {
            for (container, process) in containers(&image, file, workload) {
                for item in container["env"].as_vec().into_iter().flatten() {
                    let secret = &item["valueFrom"]["secretKeyRef"];
                    if !secret.is_badvalue() {
                        refs.push((
                            process.origin.clone(),
                            item["name"].as_str().unwrap_or_default().to_owned(),
                            secret["name"].as_str().unwrap_or_default().to_owned(),
                            secret["key"].as_str().unwrap_or_default().to_owned(),
                        ));
                    }
                }
            }
        }
    }
    for process in &processes {
        for name in [
            "WORKBENCH_SECRET_KEY",
            "WORKBENCH_SECRET_KEY_PREVIOUS",
            "WORKBENCH_METRICS_TOKEN",
        ] {
            if let Some(Value::Literal(value)) = process.setting(name) {
                assert!(
                    value.is_empty(),
                    "{}: {name} is written in the artifact; it must come from a secret",
                    process.origin
                );
            }
        }
    }
    let (file, secret) = only(&manifests, "Secret");
    let name = secret["metadata"]["name"].as_str().expect("Secret name");
    for (origin, variable, secret_name, key) in refs {
        assert_eq!(
            secret_name, name,
            "{origin}: {variable} reads the Secret `{secret_name}`, not the example's"
        );
        let value = artifacts::scalar(&secret["stringData"][key.as_str()]).unwrap_or_else(|| {
            panic!("{origin}: {variable} reads key `{key}`, which {file} does not have")
        });
        if variable.starts_with("WORKBENCH_SECRET_KEY") {
            let decoded = base64::engine::general_purpose::STANDARD.decode(value.trim());
            assert!(
                decoded.map_or(true, |bytes| bytes.len() != 32),
                "{file}: `{key}` is a usable key: a copy applied unchanged would seal \
                 secrets with a key everyone knows"
            );
        }
    }
}

#[test]
fn the_image_default_command_serves_with_the_image_settings() {
    let image = Image::read();
    let process = image.process("Containerfile (CMD)".into(), None, Vec::new());
    let sandbox = run::Sandbox::new();
    check_serve(
        &sandbox,
        &process,
        &["/healthz".to_owned(), "/readyz".to_owned()],
        &[],
        Duration::from_secs(10 + stop_budget(&process)),
    );
}

#[test]
fn compose_runs_only_commands_and_settings_the_binary_knows() {
    let image = Image::read();
    let compose = compose();
    let services = compose_services(&image, &compose);
    let sandbox = run::Sandbox::new();
    // In the order Compose starts them: the migration first.
    for (_, process) in services.iter().filter(|(_, p)| is_migrate(p)) {
        check_migrate(&sandbox, process);
    }
    for (name, process) in services.iter().filter(|(_, p)| p.serves()) {
        let service = &compose["services"][name.as_str()];
        let check = health_check(&image, process, &service["healthcheck"]["test"]);
        let grace =
            artifacts::scalar(&service["stop_grace_period"]).map_or(10, |g| artifacts::seconds(&g));
        check_serve(&sandbox, process, &[], &[check], Duration::from_secs(grace));
    }
}

#[test]
fn kubernetes_runs_only_commands_and_settings_the_binary_knows() {
    let image = Image::read();
    let manifests = manifests();
    let sandbox = run::Sandbox::new();
    let (file, job) = only(&manifests, "Job");
    for (_, process) in containers(&image, file, job) {
        check_migrate(&sandbox, &process);
    }
    let (file, deployment) = only(&manifests, "Deployment");
    let grace = pod(deployment)["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    for (container, process) in containers(&image, file, deployment) {
        let paths: Vec<String> = ["startupProbe", "readinessProbe", "livenessProbe"]
            .iter()
            .filter_map(|p| container[*p]["httpGet"]["path"].as_str().map(str::to_owned))
            .collect();
        check_serve(
            &sandbox,
            &process,
            &paths,
            &[],
            Duration::from_secs(u64::try_from(grace).unwrap_or(0)),
        );
    }
}

#[test]
fn the_systemd_unit_runs_only_commands_and_settings_the_binary_knows() {
    let (lines, processes) = unit();
    let grace = unit_setting(&lines, "TimeoutStopSec").map_or(90, artifacts::seconds);
    let sandbox = run::Sandbox::new();
    for process in &processes {
        if is_migrate(process) {
            check_migrate(&sandbox, process);
        } else {
            check_serve(
                &sandbox,
                process,
                &["/healthz".to_owned(), "/readyz".to_owned()],
                &[],
                Duration::from_secs(grace),
            );
        }
    }
}
