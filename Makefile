# Everyday commands. `make test` is the test command of the README and of CI.
.PHONY: run test lint fmt ci postgres postgres-stop api-fuzz clients sdk

# Serve on 127.0.0.1:8080 with the embedded SQLite database ./workbench.db.
run:
	cargo run -p server --bin workbench -- serve

# Every test, on SQLite and on a throw-away PostgreSQL (installed and started on 127.0.0.1:55432
# by .ci/postgres.sh when TEST_POSTGRES_URL is not already set); then, alone, the one test whose
# bounds are timed under load of its own (tests/blackbox/hang.rs); `--workspace` again, so that
# nothing is built anew (features are resolved per command) while it runs.
test:
	@if [ -z "$$TEST_POSTGRES_URL" ]; then eval "$$(.ci/postgres.sh)"; fi; \
	  TEST_POSTGRES_URL=$${TEST_POSTGRES_URL} cargo test --workspace && \
	  TEST_POSTGRES_URL=$${TEST_POSTGRES_URL} cargo test --workspace -- --ignored hang::
	CARGO_TARGET_DIR=$(CURDIR)/target/domain-reuse cargo test --manifest-path tests/domain-reuse/Cargo.toml

# Schemathesis against /openapi.json of the release binary on a fresh SQLite database: every
# check, every phase, at least 50 examples per operation; fails on any failure (.ci/api-fuzz.sh).
api-fuzz:
	bash .ci/api-fuzz.sh

# Clients generated from /openapi.json of the debug binary (Python and TypeScript), with the
# generators' warnings as errors, and a first user's journey through each (.ci/clients.sh).
clients:
	bash .ci/clients.sh

# The browser SDK (sdks/web): type check, build (which must match the committed bundle) and
# unit tests (.ci/sdk.sh).
sdk:
	bash .ci/sdk.sh

lint:
	cargo fmt --all -- --check
	cargo fmt --manifest-path tests/domain-reuse/Cargo.toml -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p workbench-domain --lib -- -D warnings
	@if cargo tree -p workbench-domain -e normal --all-features | grep -E ' (diesel|actix-web|actix-http|reqwest|r2d2|tokio|libsqlite3-sys|pq-sys) v'; then \
	  echo "crates/domain must not depend on infrastructure crates" >&2; exit 1; fi
	RUSTDOCFLAGS="-D warnings" cargo doc -p workbench-domain --no-deps
	RUSTDOCFLAGS="-D warnings" cargo doc -p workbench-domain --no-deps --all-features
	RUSTDOCFLAGS="-D missing_docs -D warnings" cargo doc --no-deps -p adapters-diesel \
	  -p adapters-jwt -p adapters-push -p adapters-webhook -p api-actix

fmt:
	cargo fmt --all

ci:
	bash .ci/run

postgres:
	@.ci/postgres.sh

postgres-stop:
	@.ci/postgres.sh stop
