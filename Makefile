# `make test` is the project's test command (CI runs it through .ci/run):
# formatting and lints, unit tests over the real fixtures, then the e2e suite
# against a real control plane and a real Jaeger built by e2e/build.sh.
.PHONY: test lint unit e2e fixtures

test: lint unit e2e

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets --locked -- -D warnings

unit:
	cargo test --locked

e2e:
	bash e2e/suite.sh

fixtures:
	bash e2e/fixtures.sh
