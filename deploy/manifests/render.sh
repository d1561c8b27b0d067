#!/usr/bin/env bash
# Renders deploy/manifests/kascade.yaml — the Helm chart deploy/helm/kascade
# with its default values, release "kascade", namespace "kascade" — for users
# without Helm. Run it after changing the chart (e2e/validate-deploy.sh fails
# while the committed file differs from a fresh rendering).
#
#   deploy/manifests/render.sh            # rewrite deploy/manifests/kascade.yaml
#   deploy/manifests/render.sh --stdout   # print the rendering instead
#
# helm is built by e2e/build.sh (pinned in e2e/versions.env); set HELM to use another.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ -z "${HELM:-}" ]]; then
  HELM="$("$ROOT/e2e/build.sh" helm | sed -n 's/^HELM=//p')"
fi
render() {
  cat <<'HEAD'
# kascade without Helm: deploy/helm/kascade rendered with its default values
# (release "kascade") by deploy/manifests/render.sh. Do not edit; change the
# chart and re-render.
#
#   kubectl create namespace kascade
#   kubectl -n kascade create secret tls kascade-webhook-tls --cert=tls.crt --key=tls.key
#   kubectl -n kascade create secret generic kascade-webhook-token --from-literal=token=$(openssl rand -hex 32)
#   kubectl -n kascade apply -f deploy/manifests/kascade.yaml
#
# The objects name no namespace (apply them with -n); the ClusterRoleBinding's
# subject is the ServiceAccount in namespace "kascade". The image is
# kascade:0.1.0: build it from the repository's Dockerfile and push it, then
# edit the two `image: kascade:0.1.0` lines (or use the chart's image.repository).
HEAD
  # The chart's files/ are symlinks into deploy/config and e2e/jaeger; helm
  # notes each one on stderr.
  "$HELM" template kascade "$ROOT/deploy/helm/kascade" --namespace kascade \
    2> >(grep -v 'found symbolic link in path' >&2)
}
if [[ "${1:-}" == --stdout ]]; then
  render
else
  render >"$ROOT/deploy/manifests/kascade.yaml.tmp"
  mv "$ROOT/deploy/manifests/kascade.yaml.tmp" "$ROOT/deploy/manifests/kascade.yaml"
  echo "wrote deploy/manifests/kascade.yaml" >&2
fi
