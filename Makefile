# `make test` is the project's test command (CI runs it through .ci/run):
# formatting and lints, unit tests over the real fixtures (on a machine kept
# busy), the judgements scored on the corpus of whole-cluster runs, the HTML
# report in a real browser (e2e/browser/), then the e2e suite against a real
# control plane and a real Jaeger built by e2e/build.sh and the fault suite;
# the fuzz targets, each for a bounded time, are the load beside the unit
# tests.
.PHONY: test lint unit fuzz corpus browser e2e faults fixtures

# Each stage's time is printed at the end (.ci/stages.sh), pass or fail.
# The fuzz stage runs in the background from the start: its build beside the
# lint and the unit build, its targets (a fixed time each) beside the unit
# tests, which pass so, as they must on a busy machine. (The corpus
# scoring beside the e2e suite was tried: the suite, whose debug kascade and
# control plane keep a core busy, took 92 s longer, against 63 s saved.)
test:
	@bash .ci/stages.sh '&fuzz' lint unit corpus browser e2e faults

# Shell scripts are parsed (bash -n), not run: e2e/experiments/ is too long
# for CI, so this is where a syntax error in it would show. The GitHub
# Actions workflows are checked by actionlint (built by e2e/build.sh, pinned
# in e2e/versions.env), with shellcheck on their scripts when it is installed.
# Clippy runs twice: on what `cargo install` builds (--lib --bins, without
# the features the dev-dependencies add: the e2e suites run the binary the
# test build makes, e2e/static-kascade.sh) and on every target.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --lib --bins --locked -- -D warnings
	cargo clippy --workspace --all-targets --locked -- -D warnings
	@for f in e2e/*.sh e2e/*/*.sh e2e/corpus/runs/*.sh .ci/*.sh examples/ci/*.sh; do bash -n "$$f" || exit 1; done
	python3 -c 'import sys, yaml; [yaml.safe_load(open(f)) for f in sys.argv[1:]]' examples/ci/*.yaml
	node --check e2e/browser/report-test.mjs
	@out="$$(bash e2e/build.sh actionlint)" && echo "actionlint .github/workflows/*.yml examples/ci/github-actions.yaml" \
	  && "$${out#ACTIONLINT=}" .github/workflows/*.yml examples/ci/github-actions.yaml

# The unit suite runs while both cores are kept busy (.ci/busy.sh): no test
# may depend on how fast the machine is. The load is the work of later
# stages: the build of the e2e harness when its cache is cold
# (.ci/prebuild.sh), and the fuzz stage, which builds the fuzz targets beside
# the unit build and runs them beside the unit tests (holding
# target/fuzz/build.lock); then CPU-burning processes (BURNERS=N, default 2)
# if the tests outlast it. The tests are built beside that load but never
# beside the burners, which would only slow the build.
MUSL := $(shell uname -m)-unknown-linux-musl
unit:
	bash e2e/static-kascade.sh --toolchain
	CARGO_BUILD_TARGET=$(MUSL) bash .ci/busy.sh --load .ci/prebuild.sh \
	  --build 'cargo test --workspace --locked --no-run && bash .ci/stages.sh --mark unit-built' \
	  --beside "$${CARGO_TARGET_DIR:-target}/fuzz/build.lock" cargo test --workspace --locked

# The kascade that `cargo test --workspace` built (the unit stage's):
# `cargo build --bin kascade` would build it again, and much of what it
# depends on, without the features the dev-dependencies turn on.
TESTED_KASCADE = CARGO_BUILD_TARGET=$(MUSL) cargo test --workspace --locked --no-run --quiet \
	&& echo "$${CARGO_TARGET_DIR:-$$PWD/target}/$(MUSL)/debug/kascade"

# The cargo-fuzz targets of fuzz/ (docs/testing.md, "Fuzzing"), each run
# for a bounded time, two at a time (.ci/fuzz.sh run: FUZZ_SECONDS, default
# 30). Seeded from the fixtures, the rules and the spans the tested kascade
# makes of the fixtures. A crash fails, naming the input kept and how to
# reproduce it. In `make test` this stage starts in the background first
# and is the load beside the unit stage: the targets are built beside the
# lint and unit build and run once the latter is made (stages.sh --await
# unit-built; at once outside `make test`), beside the unit tests.
FUZZ_LOCK = $${CARGO_TARGET_DIR:-target}/fuzz/build.lock
fuzz:
	mkdir -p "$$(dirname "$(FUZZ_LOCK)")"
	flock "$(FUZZ_LOCK)" bash -c 'bash .ci/fuzz.sh build && bash .ci/stages.sh --await unit-built \
	  && KASCADE="$$($(TESTED_KASCADE))" && export KASCADE && bash .ci/fuzz.sh run'

# explain and the UI's error marks scored against the truth of every
# whole-cluster run in e2e/corpus/ (score.sh): every failing run's first
# finding is its true cause, no healthy run raises an alarm.
corpus:
	KASCADE="$$($(TESTED_KASCADE))" && export KASCADE && bash e2e/corpus/score.sh

# The HTML report of `kascade explain` in Debian's headless Chromium, driven
# by playwright-core (e2e/browser/: setup installs both when missing); the
# screenshot stays in target/explain/report.png.
browser:
	KASCADE="$$($(TESTED_KASCADE))" && export KASCADE && bash e2e/browser/run.sh

e2e:
	bash e2e/suite.sh

# Overload, a Jaeger outage, kill -9, oversized objects, etcd slow then gone:
# every event answered 200 must be in Jaeger, no span twice past its bound;
# then the webhook's limits and a burst of 200 searches at the read side
# (e2e/faults.sh; ~4 minutes).
faults:
	bash e2e/faults.sh

fixtures:
	bash e2e/fixtures.sh
