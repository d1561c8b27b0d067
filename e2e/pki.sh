# Credentials of a control plane and of kascade's audit webhook, shared by the
# e2e harness (e2e/cluster.sh) and the docker-compose quickstart
# (deploy/compose/init.sh), so both run with the same certificates, identities
# and kubeconfigs. Source it; it only defines functions. Needs openssl.
# shellcheck shell=bash

# pki_cluster DIR NAME SANS: cluster CA, the apiserver's serving certificate
# (subjectAltName SANS, e.g. "IP:127.0.0.1,DNS:kubernetes") and the
# service-account signing key pair.
pki_cluster() {
  local pki="$1" name="$2" sans="$3"
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 \
    -subj "/CN=kascade-e2e-$name-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" \
    -subj "/CN=kube-apiserver" 2>/dev/null
  printf 'subjectAltName=%s\n' "$sans" >"$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -out "$pki/apiserver.crt" -days 3650 -extfile "$pki/san.ext" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# pki_kubeconfig FILE CLUSTER SERVER CA_FILE USER TOKEN
pki_kubeconfig() {
  local file="$1" cluster="$2" server="$3" ca="$4" user="$5" token="$6"
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: $cluster
  cluster:
    server: $server
    certificate-authority: $ca
users:
- name: $user
  user:
    token: $token
contexts:
- name: $cluster
  context: {cluster: $cluster, user: $user}
current-context: $cluster
KCFG
}

# pki_identities PKI_DIR KUBECONFIG_DIR CLUSTER SERVER: one token per
# component (so audit events show who acted) in PKI_DIR/tokens.csv for the
# apiserver's --token-auth-file, and a kubeconfig for each in KUBECONFIG_DIR:
# admin, kcm, scheduler, kwok, kascade (a reader without RBAC bindings).
# Sets ADMIN_TOKEN.
pki_identities() {
  local pki="$1" kdir="$2" cluster="$3" server="$4"
  local kcm_token sched_token kwok_token reader_token
  ADMIN_TOKEN="$(openssl rand -hex 16)"; kcm_token="$(openssl rand -hex 16)"
  sched_token="$(openssl rand -hex 16)"; kwok_token="$(openssl rand -hex 16)"
  reader_token="$(openssl rand -hex 16)"
  mkdir -p "$pki" "$kdir"
  cat >"$pki/tokens.csv" <<CSV
$ADMIN_TOKEN,kascade-e2e-admin,uid-admin,"system:masters"
$kcm_token,system:kube-controller-manager,uid-kcm
$sched_token,system:kube-scheduler,uid-scheduler
$kwok_token,kwok-kubelet,uid-kwok,"system:masters"
$reader_token,kascade,uid-kascade
CSV
  chmod 600 "$pki/tokens.csv"
  pki_kubeconfig "$kdir/admin.kubeconfig" "$cluster" "$server" "$pki/ca.crt" kascade-e2e-admin "$ADMIN_TOKEN"
  pki_kubeconfig "$kdir/kcm.kubeconfig" "$cluster" "$server" "$pki/ca.crt" system:kube-controller-manager "$kcm_token"
  pki_kubeconfig "$kdir/scheduler.kubeconfig" "$cluster" "$server" "$pki/ca.crt" system:kube-scheduler "$sched_token"
  pki_kubeconfig "$kdir/kwok.kubeconfig" "$cluster" "$server" "$pki/ca.crt" kwok-kubelet "$kwok_token"
  pki_kubeconfig "$kdir/kascade.kubeconfig" "$cluster" "$server" "$pki/ca.crt" kascade "$reader_token"
}

# pki_webhook DIR SANS: the audit webhook's CA, kascade's serving certificate
# (subjectAltName SANS), the apiserver's client certificate (mutual TLS) and
# the bearer token. Kept when already there, so one kascade can receive the
# webhooks of several clusters.
pki_webhook() {
  local p="$1" sans="$2"
  [[ -f "$p/kascade.crt" && -f "$p/apiserver-client.crt" ]] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 \
    -subj "/CN=kascade-e2e-webhook-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/kascade.key" -out "$p/kascade.csr" -subj "/CN=kascade" 2>/dev/null
  printf 'subjectAltName=%s\n' "$sans" >"$p/kascade.ext"
  openssl x509 -req -in "$p/kascade.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/kascade.crt" -days 3650 -extfile "$p/kascade.ext" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/apiserver-client.key" -out "$p/apiserver-client.csr" \
    -subj "/CN=kube-apiserver-audit" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$p/client.ext"
  openssl x509 -req -in "$p/apiserver-client.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/apiserver-client.crt" -days 3650 -extfile "$p/client.ext" 2>/dev/null
  openssl rand -hex 16 >"$p/webhook.token"
  chmod 600 "$p"/*.key "$p/webhook.token"
}

# pki_webhook_kubeconfig FILE URL WEBHOOK_PKI_DIR: the apiserver's
# --audit-webhook-config-file: kascade's URL (/audit/<cluster>), its CA, the
# client certificate and the bearer token.
pki_webhook_kubeconfig() {
  local file="$1" url="$2" p="$3"
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: kascade
  cluster:
    server: $url
    certificate-authority: $p/ca.crt
users:
- name: kube-apiserver
  user:
    token: $(cat "$p/webhook.token")
    client-certificate: $p/apiserver-client.crt
    client-key: $p/apiserver-client.key
contexts:
- name: kascade
  context: {cluster: kascade, user: kube-apiserver}
current-context: kascade
KCFG
}

# pki_otlp DIR SANS: TLS of the raw Jaeger's OTLP receivers (e2e/jaeger/raw-tls.yaml):
# a CA of their own, Jaeger's serving certificate (subjectAltName SANS) and the
# client certificate kascade presents for mutual TLS. Kept when already there.
pki_otlp() {
  local p="$1" sans="$2"
  [[ -f "$p/jaeger.crt" && -f "$p/kascade-client.crt" ]] && return 0
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 \
    -subj "/CN=kascade-e2e-otlp-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/jaeger.key" -out "$p/jaeger.csr" -subj "/CN=jaeger" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$sans" >"$p/jaeger.ext"
  openssl x509 -req -in "$p/jaeger.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/jaeger.crt" -days 3650 -extfile "$p/jaeger.ext" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$p/kascade-client.key" -out "$p/kascade-client.csr" \
    -subj "/CN=kascade-otlp-exporter" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$p/client.ext"
  openssl x509 -req -in "$p/kascade-client.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -out "$p/kascade-client.crt" -days 3650 -extfile "$p/client.ext" 2>/dev/null
  chmod 600 "$p"/*.key
}
