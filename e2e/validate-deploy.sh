#!/usr/bin/env bash
# Validates the deployment artifacts without a Docker engine, against the e2e
# harness's real apiserver:
#
#   - docker-compose.yml loads with compose-go (the library of `docker compose
#     config`: schema, interpolation, consistency, env files), its bind mounts,
#     build contexts and build targets exist, its images are pinned to the
#     versions in e2e/versions.env;
#   - docker-compose.yml runs the harness's own files (audit policy, kwok
#     stages and nodes, Jaeger configs, e2e/pki.sh, deploy/config/*.env) and
#     the control plane with the same flags as e2e/cluster.sh;
#   - the Helm chart lints and renders (default values and deploy/helm/kascade/ci/*.yaml),
#     its files/ are the same files, its defaults agree with deploy/config/*.env;
#   - every rendered object, the plain manifests (deploy/manifests/) and the
#     quickstart's demo workload pass `kubectl apply --dry-run=server` on the
#     harness apiserver; deploy/manifests/kascade.yaml is up to date;
#   - deploy/examples/ has the harness's audit policy and a valid kubeconfig.
#
# Needs a harness cluster: `e2e/cluster.sh up` and `source e2e/.run/env`
# (KUBECTL, KUBECONFIG). The dry runs are audited like any request (kascade
# sees them); they go to namespace kascade-deploy-check (created if missing,
# the one real write) so they stay away from the scenarios' objects.
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/.." && pwd)"
cd "$ROOT"
# shellcheck source=versions.env
source "$E2E_DIR/versions.env"
: "${KUBECTL:?source e2e/.run/env first (e2e/cluster.sh up)}"
: "${KUBECONFIG:?source e2e/.run/env first (e2e/cluster.sh up)}"
CHART="$ROOT/deploy/helm/kascade"
CHECK_NS=kascade-deploy-check
started=$SECONDS

log() { printf '[deploy %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
passed=0; failed=0
pass() { passed=$((passed + 1)); log "ok: $*"; }
fail() { failed=$((failed + 1)); log "FAIL: $*"; }
# check DESCRIPTION COMMAND...: runs COMMAND, output shown only on failure.
check() {
  local what="$1"; shift
  local out
  if out="$("$@" 2>&1)"; then pass "$what"; else fail "$what"; printf '%s\n' "$out" | tail -n 30 >&2; fi
}

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
HELM="$("$E2E_DIR/build.sh" helm | sed -n 's/^HELM=//p')"
COMPOSE_CHECK="$("$E2E_DIR/build.sh" compose-check | sed -n 's/^COMPOSE_CHECK=//p')"
# The chart's files/ are symlinks; helm notes each one on stderr.
helm_() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
# Non-comment KEY=VALUE lines of an env file.
env_lines() { grep -Ev '^[[:space:]]*(#|$)' "$1"; }

# ---------------------------------------------------------------- compose
log "docker-compose.yml (compose-go $COMPOSE_GO_VERSION; Dockerfiles: buildkit $BUILDKIT_VERSION parser)"
check "docker-compose.yml loads and validates" "$COMPOSE_CHECK" -project-dir "$ROOT" docker-compose.yml
"$COMPOSE_CHECK" -project-dir "$ROOT" -print binds docker-compose.yml >"$work/binds"
"$COMPOSE_CHECK" -project-dir "$ROOT" -print images docker-compose.yml >"$work/images"

# The quickstart mounts the harness's files, and the harness uses them.
compose_mounts() {
  local rc=0 service file
  while read -r service file; do
    if ! grep -q "^$service $file " "$work/binds"; then
      echo "service $service does not mount $file"; rc=1
    fi
    [[ -f "$file" ]] || { echo "$file is missing"; rc=1; }
  done <<'LIST'
kube-apiserver e2e/audit-policy.yaml
kwok e2e/kwok/stages.yaml
cluster-setup e2e/kwok/nodes.yaml
jaeger-raw e2e/jaeger/raw.yaml
jaeger-query e2e/jaeger/query.yaml
init e2e/pki.sh
LIST
  for file in audit-policy.yaml kwok/stages.yaml kwok/nodes.yaml jaeger/raw.yaml pki.sh; do
    grep -q "\$E2E_DIR/$file\"" "$E2E_DIR/cluster.sh" || { echo "e2e/cluster.sh does not use e2e/$file"; rc=1; }
  done
  grep -q 'jaeger/query.yaml"' "$E2E_DIR/suite.sh" || { echo "e2e/suite.sh does not use e2e/jaeger/query.yaml"; rc=1; }
  return $rc
}
check "compose mounts the harness's audit policy, kwok stages and nodes, Jaeger configs, pki.sh" compose_mounts

# deploy/config/*.env reach the containers unchanged (nothing overrides them).
compose_env() {
  local rc=0 service file line
  for pair in kascade:collect kascade-frontend:frontend; do
    service="${pair%%:*}"; file="deploy/config/${pair#*:}.env"
    "$COMPOSE_CHECK" -project-dir "$ROOT" -print "env:$service" docker-compose.yml >"$work/env-$service"
    while read -r line; do
      grep -qxF "$line" "$work/env-$service" || { echo "service $service: $line of $file is not in its environment"; rc=1; }
    done < <(env_lines "$file")
  done
  # The frontend must cut the same windows as the collector.
  local w1 w2
  w1="$(grep '^KASCADE_WINDOW=' deploy/config/collect.env)"; w2="$(grep '^KASCADE_WINDOW=' deploy/config/frontend.env)"
  [[ -n "$w1" && "$w1" == "$w2" ]] || { echo "KASCADE_WINDOW differs: collect.env '$w1', frontend.env '$w2'"; rc=1; }
  return $rc
}
check "compose runs kascade with deploy/config/collect.env and frontend.env" compose_env
for f in collect frontend; do
  grep -q "deploy/config/$f.env" "$E2E_DIR/suite.sh" \
    || log "note: e2e/suite.sh does not load deploy/config/$f.env (the e2e run does not use the shared settings)"
done

# Images are the versions the harness builds.
compose_versions() {
  local rc=0 service want
  while read -r service want; do
    grep -qxF "$service $want" "$work/images" || { echo "service $service: want image $want, have: $(grep "^$service " "$work/images")"; rc=1; }
  done <<LIST
etcd gcr.io/etcd-development/etcd:$ETCD_VERSION
kube-apiserver registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION
kube-controller-manager registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION
kube-scheduler registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION
kwok registry.k8s.io/kwok/kwok:$KWOK_VERSION
jaeger-raw jaegertracing/jaeger:${JAEGER_RELEASE#v}
jaeger-query jaegertracing/jaeger:${JAEGER_RELEASE#v}
demo registry.k8s.io/kubectl:$KUBERNETES_VERSION
LIST
  grep -qx "ARG KUBERNETES_VERSION=$KUBERNETES_VERSION" deploy/compose/tools.Dockerfile \
    || { echo "deploy/compose/tools.Dockerfile: ARG KUBERNETES_VERSION is not $KUBERNETES_VERSION"; rc=1; }
  local n
  n="$(grep -c "tag: \"${JAEGER_RELEASE#v}\"" "$CHART/values.yaml")"
  [[ "$n" == 2 ]] || { echo "chart values.yaml: want both Jaeger image tags \"${JAEGER_RELEASE#v}\", found $n"; rc=1; }
  grep -qx "      tag: $ETCD_VERSION" "$CHART/values.yaml" || { echo "chart values.yaml: the span cache's etcd tag is not $ETCD_VERSION"; rc=1; }
  return $rc
}
check "compose and chart images are pinned to e2e/versions.env" compose_versions
if command -v rustc >/dev/null; then
  rust="$(rustc --version | awk '{print $2}')"
  grep -qx "ARG RUST_VERSION=$rust" Dockerfile || log "note: Dockerfile's RUST_VERSION is not this machine's rustc $rust"
fi

# The control plane in compose has the flags of e2e/cluster.sh, with the same
# values where cluster.sh's value is a constant (not a path, port or name
# from a variable). Differences by design: cluster.sh binds the apiserver to
# 127.0.0.1 and advertises that; in compose it listens on all addresses of its
# container and advertises the container's address, which it finds itself.
# pairs_of_cluster_sh COMPONENT: "--flag value" lines (value may be empty).
pairs_of_cluster_sh() {
  awk -v name="$1" '
    $1 == "start" && $2 == name { on = 1 }
    on { line = line " " $0; if ($0 !~ /\\$/) exit }
    END { gsub(/\\/, " ", line); print line }' "$E2E_DIR/cluster.sh" \
    | tr -s ' ' '\n' | tr -d '"' | awk '
      /^--/ { if (flag != "") print flag " " val; split($0, kv, "="); flag = kv[1]; val = (index($0, "=") ? substr($0, index($0, "=") + 1) : ""); next }
      flag != "" && val == "" { val = $0 }
      END { if (flag != "") print flag " " val }' | sort -u
}
pairs_of_compose() {
  "$COMPOSE_CHECK" -project-dir "$ROOT" -print "command:$1" docker-compose.yml | awk '
    /^--/ { if (flag != "") print flag " " val; split($0, kv, "="); flag = kv[1]; val = (index($0, "=") ? substr($0, index($0, "=") + 1) : ""); next }
    flag != "" && val == "" { val = $0 }
    END { if (flag != "") print flag " " val }' | sort -u
}
compose_flags() {
  local rc=0 c only_harness only_compose flag val cval
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    pairs_of_cluster_sh "$c" >"$work/pairs-harness"
    pairs_of_compose "$c" >"$work/pairs-compose"
    [[ -s "$work/pairs-harness" ]] || { echo "no flags of $c found in e2e/cluster.sh"; rc=1; continue; }
    only_harness="$(comm -23 <(cut -d' ' -f1 "$work/pairs-harness") <(cut -d' ' -f1 "$work/pairs-compose") | tr '\n' ' ')"
    only_compose="$(comm -13 <(cut -d' ' -f1 "$work/pairs-harness") <(cut -d' ' -f1 "$work/pairs-compose") | tr '\n' ' ')"
    [[ "$c" == kube-apiserver ]] && only_harness="${only_harness/--advertise-address /}"
    if [[ -n "$only_harness$only_compose" ]]; then
      echo "$c: flags only in e2e/cluster.sh: ${only_harness:-none}; only in docker-compose.yml: ${only_compose:-none}"; rc=1
    fi
    while read -r flag val; do
      [[ "$val" == *'$'* ]] && continue
      [[ "$c $flag" == "kube-apiserver --bind-address" || "$c $flag" == "kube-apiserver --advertise-address" ]] && continue
      cval="$(awk -v f="$flag" '$1 == f { print $2 }' "$work/pairs-compose")"
      [[ "$cval" == "$val" ]] || { echo "$c $flag: e2e/cluster.sh has '$val', docker-compose.yml '$cval'"; rc=1; }
    done <"$work/pairs-harness"
    echo "$c: $(wc -l <"$work/pairs-compose") flags"
  done
  return $rc
}
check "compose's etcd, apiserver, controller-manager, scheduler and kwok flags = e2e/cluster.sh's" compose_flags

# ---------------------------------------------------------------- helm
log "Helm chart (helm $HELM_VERSION, Kubernetes $KUBERNETES_VERSION)"
chart_files() {
  local rc=0 link target
  while read -r link target; do
    [[ "$(readlink -f "$CHART/files/$link")" == "$ROOT/$target" ]] \
      || { echo "$CHART/files/$link is not a link to $target"; rc=1; }
  done <<'LIST'
collect.env deploy/config/collect.env
frontend.env deploy/config/frontend.env
jaeger-raw.yaml e2e/jaeger/raw.yaml
jaeger-query.yaml e2e/jaeger/query.yaml
LIST
  return $rc
}
check "chart files/ link to deploy/config/*.env and e2e/jaeger/*.yaml" chart_files

values_sets=(default "$CHART"/ci/*-values.yaml)
for v in "${values_sets[@]}"; do
  if [[ "$v" == default ]]; then name=default; args=(); else name="$(basename "$v" -values.yaml)"; args=(-f "$v"); fi
  check "helm lint --strict ($name values)" helm_ lint --strict --kube-version "$KUBERNETES_VERSION" "$CHART" "${args[@]}"
  check "helm template ($name values)" sh -c '"$@" >"'"$work/render-$name.yaml"'"' _ \
    "$HELM" template kascade "$CHART" --namespace "$CHECK_NS" --kube-version "$KUBERNETES_VERSION" "${args[@]}"
done

# Safe by default: no rendering of a webhook that accepts anyone's audit events.
refuses_unauthenticated() {
  local out
  if out="$("$HELM" template kascade "$CHART" --set collector.webhookToken.enabled=false 2>&1)"; then
    echo "rendered a webhook with neither token nor client certificates"; return 1
  fi
  grep -q 'forged audit events' <<<"$out" || { echo "unexpected error: $out"; return 1; }
  "$HELM" template kascade "$CHART" --set collector.webhookToken.enabled=false \
    --set collector.allowUnauthenticated=true >/dev/null
}
check "chart refuses an unauthenticated webhook unless allowUnauthenticated" refuses_unauthenticated

# The chart's defaults are deploy/config/*.env.
# doc_of FILE KIND NAME: the YAML document of that object.
doc_of() {
  awk -v kind="$2" -v name="$3" '
    function flush() { if (doc ~ ("\nkind: " kind "\n") && doc ~ ("\n  name: " name "\n")) printf "%s", doc; doc = "" }
    /^---/ { flush(); doc = "---\n"; next }
    { doc = doc $0 "\n" }
    END { flush() }' "$1"
}
chart_env() {
  local rc=0 cm file k val
  for pair in kascade-collector:collect kascade-frontend:frontend; do
    cm="${pair%%:*}"; file="deploy/config/${pair#*:}.env"
    doc_of "$work/render-default.yaml" ConfigMap "$cm" >"$work/cm-$cm"
    [[ -s "$work/cm-$cm" ]] || { echo "no ConfigMap $cm in the default rendering"; rc=1; continue; }
    while IFS='=' read -r k val; do
      grep -qxF "  $k: \"$val\"" "$work/cm-$cm" || { echo "ConfigMap $cm lacks $k=$val of $file"; rc=1; }
    done < <(env_lines "$file")
  done
  return $rc
}
check "chart ConfigMaps carry deploy/config/*.env" chart_env

check "deploy/manifests/kascade.yaml is the chart's current rendering (deploy/manifests/render.sh)" \
  sh -c 'HELM="$1" "$2" --stdout | diff -u "$3" -' _ "$HELM" "$ROOT/deploy/manifests/render.sh" "$ROOT/deploy/manifests/kascade.yaml"

# ---------------------------------------------------------------- dry runs
log "kubectl apply --dry-run=server against ${APISERVER_URL:-the harness apiserver} (namespace $CHECK_NS)"
if ! "$KUBECTL" get namespace "$CHECK_NS" >/dev/null 2>&1; then
  "$KUBECTL" create namespace "$CHECK_NS" >/dev/null
fi
have_monitoring=false
if "$KUBECTL" api-resources --api-group=monitoring.coreos.com -o name 2>/dev/null | grep -qx 'servicemonitors.monitoring.coreos.com'; then
  have_monitoring=true
fi
# split_kind FILE KIND OUT_REST OUT_KIND: documents of KIND apart from the rest.
split_kind() {
  awk -v kind="$2" -v rest="$3" -v sel="$4" '
    function flush() { if (doc != "") { if (doc ~ ("\nkind: " kind "\n")) printf "%s", doc > sel; else printf "%s", doc > rest } doc = "" }
    /^---/ { flush(); doc = "---\n"; next }
    { doc = doc $0 "\n" }
    END { flush() }' "$1"
  touch "$3" "$4"
}
dry_run() {
  local file="$1"
  "$KUBECTL" apply --dry-run=server --validate=strict -n "$CHECK_NS" -f "$file" -o name >"$work/dry.out" 2>&1 \
    || { cat "$work/dry.out"; return 1; }
  echo "$(wc -l <"$work/dry.out") objects: $(tr '\n' ' ' <"$work/dry.out")"
}
for v in "${values_sets[@]}"; do
  if [[ "$v" == default ]]; then name=default; else name="$(basename "$v" -values.yaml)"; fi
  [[ -f "$work/render-$name.yaml" ]] || continue
  split_kind "$work/render-$name.yaml" ServiceMonitor "$work/apply-$name.yaml" "$work/sm-$name.yaml"
  check "dry-run apply of the chart ($name values)" dry_run "$work/apply-$name.yaml"
  if [[ -s "$work/sm-$name.yaml" ]]; then
    if $have_monitoring; then
      check "dry-run apply of the ServiceMonitor ($name values)" dry_run "$work/sm-$name.yaml"
    else
      log "note: ServiceMonitor ($name values) rendered but not dry-run: this apiserver has no monitoring.coreos.com/v1 (prometheus-operator's CRD)"
    fi
  fi
done
check "dry-run apply of deploy/manifests/kascade.yaml" dry_run "$ROOT/deploy/manifests/kascade.yaml"
# The quickstart's demo, renamed so that it cannot be taken for the
# scenarios' default/hello (the dry run is audited too).
sed -e 's/^  namespace: default$/  namespace: '"$CHECK_NS"'/' -e 's/^  name: hello$/  name: quickstart-demo/' \
  deploy/compose/demo.yaml >"$work/demo.yaml"
check "dry-run apply of the quickstart demo (deploy/compose/demo.yaml)" dry_run "$work/demo.yaml"

# ---------------------------------------------------------------- examples
check "deploy/examples/audit-policy.yaml has the rules of e2e/audit-policy.yaml" \
  diff -u <(grep -Ev '^[[:space:]]*#' e2e/audit-policy.yaml) <(grep -Ev '^[[:space:]]*#' deploy/examples/audit-policy.yaml)
check "deploy/examples/audit-webhook.kubeconfig is a valid kubeconfig" \
  "$KUBECTL" config view --kubeconfig deploy/examples/audit-webhook.kubeconfig
# The chart's in-cluster kubeconfig (collector.inClusterKubeconfig, on in ci/all-values.yaml).
doc_of "$work/render-all.yaml" ConfigMap kascade-collector-in-cluster \
  | awk '/^  kubeconfig: \|/ { on = 1; next } on { sub(/^    /, ""); print }' >"$work/in-cluster.kubeconfig"
check "the chart's in-cluster kubeconfig is a valid kubeconfig" \
  sh -c '[ -s "$2" ] && "$1" config view --kubeconfig "$2"' _ "$KUBECTL" "$work/in-cluster.kubeconfig"

log "finished in $((SECONDS - started))s"
echo "validate-deploy: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
