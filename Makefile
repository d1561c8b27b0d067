# `make test` is the project's test command (CI runs it through .ci/run):
# formatting and lints, unit tests over the real fixtures (on a machine kept
# busy), the judgements scored on the corpus of whole-cluster runs, the HTML
# report in a real browser (e2e/browser/), then the e2e
# suite against a real control plane and a real Jaeger
# built by e2e/build.sh, then the fault suite.
.PHONY: test lint unit corpus browser e2e faults fixtures

# Each stage's time is printed at the end (.ci/stages.sh), pass or fail.
test:
	@bash .ci/stages.sh lint unit corpus browser e2e faults

# Shell scripts are parsed (bash -n), not run: e2e/experiments/ is too long
# for CI, so this is where a syntax error in it would show. The GitHub
# Actions workflows are checked by actionlint (built by e2e/build.sh, pinned
# in e2e/versions.env), with shellcheck on their scripts when it is installed.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	@for f in e2e/*.sh e2e/*/*.sh e2e/corpus/runs/*.sh .ci/*.sh examples/ci/*.sh; do bash -n "$$f" || exit 1; done
	python3 -c 'import sys, yaml; [yaml.safe_load(open(f)) for f in sys.argv[1:]]' examples/ci/*.yaml
	node --check e2e/browser/report-test.mjs
	@out="$$(bash e2e/build.sh actionlint)" && echo "actionlint .github/workflows/*.yml examples/ci/github-actions.yaml" \
	  && "$${out#ACTIONLINT=}" .github/workflows/*.yml examples/ci/github-actions.yaml

# The unit suite runs while two CPU-burning processes keep both cores busy
# (.ci/busy.sh; BURNERS=N to change): no test may depend on how fast the
# machine is. It is built first, without the burners, which would only make
# the compiler slower.
unit:
	cargo test --workspace --locked --no-run
	bash .ci/busy.sh cargo test --workspace --locked

# explain and the UI's error marks scored against the truth of every
# whole-cluster run in e2e/corpus/ (score.sh): every failing run's first
# finding is its true cause, no healthy run raises an alarm.
corpus:
	bash e2e/corpus/score.sh

# The HTML report of `kascade explain` in Debian's headless Chromium, driven
# by playwright-core (e2e/browser/: setup installs both when missing); the
# screenshot stays in target/explain/report.png.
browser:
	bash e2e/browser/run.sh

e2e:
	bash e2e/suite.sh

# Overload, a Jaeger outage, kill -9, oversized objects, etcd slow then gone:
# every event answered 200 must be in Jaeger (e2e/faults.sh; ~4 minutes).
faults:
	bash e2e/faults.sh

fixtures:
	bash e2e/fixtures.sh
