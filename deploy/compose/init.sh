#!/usr/bin/env bash
# docker-compose quickstart, service `init`: writes the control plane's and
# the audit webhook's credentials into the `pki` volume with the same code as
# the e2e harness (e2e/pki.sh, mounted at /e2e). Runs once per volume; `docker
# compose down -v` starts over.
set -euo pipefail
# shellcheck source=../../e2e/pki.sh
source /e2e/pki.sh
PKI=/pki
CLUSTER="${CLUSTER_NAME:?}"
# kascade runs as this user (Dockerfile) and must read its key and token.
KASCADE_UID=10001
if [[ -f "$PKI/.complete" ]]; then
  echo "init: credentials of cluster $(cat "$PKI/.complete") already in the pki volume"
  exit 0
fi
echo "init: writing credentials for cluster $CLUSTER"
pki_cluster "$PKI" "$CLUSTER" \
  "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kube-apiserver,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
pki_identities "$PKI" "$PKI" "$CLUSTER" "https://kube-apiserver:6443"
pki_webhook "$PKI/webhook" "IP:127.0.0.1,DNS:localhost,DNS:kascade"
pki_webhook_kubeconfig "$PKI/audit-webhook.kubeconfig" "https://kascade:8090/audit/$CLUSTER" "$PKI/webhook"
chown "$KASCADE_UID:$KASCADE_UID" "$PKI/webhook/kascade.key" "$PKI/webhook/webhook.token"
echo "$CLUSTER" >"$PKI/.complete"
echo "init: done"
