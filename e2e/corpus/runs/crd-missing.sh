#!/usr/bin/env bash
# A custom resource for a CRD that does not exist: a deploy pipeline posts
# Widget nightly-report (example.com/v1) to the API (kubectl create --raw, as
# a REST client would), but CRD widgets.example.com was never installed:
# 404 the server could not find the requested resource. (A plain kubectl
# apply fails before sending anything, on discovery, and leaves no write in
# the audit log.) The run expects the failure.
source "$(dirname "$0")/lib.sh"
NS=crd-demo
fresh_namespace "$NS"
cat >"$CORPUS_WORK/widget.json" <<JSON
{"apiVersion": "example.com/v1", "kind": "Widget",
 "metadata": {"name": "nightly-report", "namespace": "$NS"},
 "spec": {"size": 3, "color": "blue"}}
JSON
say "create widget nightly-report (no CRD widgets.example.com)"
if k create --raw "/apis/example.com/v1/namespaces/$NS/widgets" -f "$CORPUS_WORK/widget.json" 2>"$CORPUS_WORK/create.err"; then
  fail "the create of widget nightly-report succeeded"
fi
grep -q "could not find the requested resource" "$CORPUS_WORK/create.err" \
  || fail "the create failed otherwise: $(cat "$CORPUS_WORK/create.err")"
say "refused as expected: $(cat "$CORPUS_WORK/create.err")"
if k apply -f "$CORPUS_WORK/widget.json" 2>"$CORPUS_WORK/apply.err"; then fail "kubectl apply of the widget succeeded"; fi
say "kubectl apply fails too: $(cat "$CORPUS_WORK/apply.err")"
wait_until 30 "the 404 create in the audit log" audit_has \
  "ev['verb'] == 'create' and ref(ev).get('resource') == 'widgets' and code(ev) == 404"
