#!/usr/bin/env bash
# Builds the e2e harness's real components from the Go module proxy, pinned by
# e2e/versions.env, into a cache outside the repo. A component whose binary for
# the pinned version is already cached is skipped.
#
#   e2e/build.sh [etcd|kubernetes|kwok|jaeger|helm|compose-check|actionlint|otelcol|node|kubelet|containerd|runc|cni|pause|all]   (default: all)
#
# Prints the bin directory on its last line of stdout-friendly output as
#   KASCADE_E2E_BIN=<dir>
# (`helm`, `compose-check` and `actionlint` alone print HELM=<path> /
# COMPOSE_CHECK=<path> / ACTIONLINT=<path>; `all` leaves actionlint out: only
# `make lint` uses it). `node` builds what a real node beside the kwok nodes
# runs (e2e/node.sh; not part of `all`) and prints NODE_BIN=<dir> and friends.
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$E2E_DIR/versions.env"

CACHE_DIR="${KASCADE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kascade-e2e}"
mkdir -p "$CACHE_DIR"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN=local

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# bin_dir NAME VERSION -> cache dir for that component version
bin_dir() { echo "$CACHE_DIR/$1-$2/bin"; }

# Runs a build step with its output in a log file; on failure prints the tail.
run_logged() {
  local logfile="$1"; shift
  if ! "$@" >"$logfile" 2>&1; then
    log "FAILED: $*"
    tail -n 40 "$logfile" >&2
    return 1
  fi
}

build_etcd() {
  local out; out="$(bin_dir etcd "$ETCD_VERSION")"
  if [[ -x "$out/etcd" ]]; then log "etcd $ETCD_VERSION cached"; return; fi
  log "building etcd $ETCD_VERSION (a few minutes on 2 cores)"
  local work="$CACHE_DIR/src/etcd-$ETCD_VERSION"
  rm -rf "$work"; mkdir -p "$work" "$out"
  # etcd's own main module uses relative replaces, so a wrapper module calls etcdmain.
  cat >"$work/go.mod" <<MOD
module kascade.local/e2e/etcd
go 1.24
MOD
  cat >"$work/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$work" && run_logged "$work/build.log" go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && run_logged "$work/build.log" go build -trimpath -o "$out/etcd.tmp" . ) 
  mv "$out/etcd.tmp" "$out/etcd"
  log "etcd $ETCD_VERSION built"
}

# k8s_wrapper_module WORK PKG...: a module in WORK that builds k8s.io/kubernetes
# KUBERNETES_VERSION's commands PKG... (its go.sum resolved once, then kept).
k8s_wrapper_module() {
  local work="$1"; shift
  [[ -f "$work/go.sum" ]] && return 0
  log "resolving k8s.io/kubernetes $KUBERNETES_VERSION for $*"
  local modfile p
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  # k8s.io/kubernetes replaces every staging module with ./staging/...; point them at
  # the published staging modules of the same release instead.
  {
    echo "module kascade.local/e2e/kubernetes"
    grep -E '^go ' "$modfile"
    grep -E '^godebug ' "$modfile" || true
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo "replace ("
    grep -E '=> \./staging/src/' "$modfile" | awk -v v="$KUBERNETES_STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$work/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for p in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$p"; done
    printf ')\n'
  } >"$work/tools.go"
  (cd "$work" && run_logged "$work/tidy.log" go mod tidy -e) || { rm -f "$work/go.sum"; return 1; }
}

K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitTreeState=clean"

build_kubernetes() {
  local out; out="$(bin_dir kubernetes "$KUBERNETES_VERSION")"
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=()
  for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || missing+=("$b"); done
  if [[ ${#missing[@]} -eq 0 ]]; then log "kubernetes $KUBERNETES_VERSION cached"; return; fi
  local work="$CACHE_DIR/src/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$work" "$out"
  k8s_wrapper_module "$work" "${bins[@]}"
  for b in "${missing[@]}"; do
    log "building $b $KUBERNETES_VERSION (several minutes each on 2 cores)"
    (cd "$work" && run_logged "$work/build-$b.log" go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$out/$b.tmp" "$out/$b"
    log "$b built"
  done
}

build_kwok() {
  local out; out="$(bin_dir kwok "$KWOK_VERSION")"
  if [[ -x "$out/kwok" ]]; then log "kwok $KWOK_VERSION cached"; return; fi
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out"
  local work="$CACHE_DIR/src/kwok-$KWOK_VERSION"; mkdir -p "$work"
  GOBIN="$out" run_logged "$work/build.log" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  log "kwok $KWOK_VERSION built"
}

build_jaeger() {
  local out; out="$(bin_dir jaeger "$JAEGER_RELEASE")"
  if [[ -x "$out/jaeger" ]]; then log "jaeger $JAEGER_RELEASE cached"; return; fi
  if [[ -z "${JAEGER_MODULE_VERSION:-}" ]]; then log "JAEGER_MODULE_VERSION is not set in versions.env"; return 1; fi
  log "building jaeger $JAEGER_RELEASE ($JAEGER_MODULE_VERSION; several minutes on 2 cores)"
  mkdir -p "$out"
  local work="$CACHE_DIR/src/jaeger-$JAEGER_RELEASE"; mkdir -p "$work"
  if [[ ! -f "$work/go.sum" ]]; then
    local modfile moddir
    modfile="$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    moddir="$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    # `go install pkg@version` refuses modules with replace directives, so a
    # wrapper module requires jaeger and repeats its replaces.
    {
      echo "module kascade.local/e2e/jaeger"
      grep -E '^go ' "$modfile"
      echo "require github.com/jaegertracing/jaeger $JAEGER_MODULE_VERSION"
      grep -E '^replace ' "$modfile" || true
    } >"$work/go.mod"
    cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
    # Jaeger's own go.sum pins the same build list; the checksum database here
    # does not answer for all of its dependencies.
    cp "$moddir/go.sum" "$work/go.sum"; chmod u+w "$work/go.sum"
    (cd "$work" && run_logged "$work/tidy.log" go mod tidy -e) || { rm -f "$work/go.sum"; return 1; }
  fi
  (cd "$work" && run_logged "$work/build.log" go build -trimpath -ldflags "-s -w" -o "$out/jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$out/jaeger.tmp" "$out/jaeger"
  log "jaeger $JAEGER_RELEASE built"
}

build_helm() {
  local out; out="$(bin_dir helm "$HELM_VERSION")"
  if [[ -x "$out/helm" ]]; then log "helm $HELM_VERSION cached"; return; fi
  log "building helm $HELM_VERSION (a few minutes on 2 cores)"
  local t0=$SECONDS
  mkdir -p "$out"
  local work="$CACHE_DIR/src/helm-$HELM_VERSION"; mkdir -p "$work"
  # Helm's Makefile derives its default Kubernetes version (.Capabilities,
  # lint) from the client-go it is built with; without it helm assumes v1.20.
  local modfile k8s_minor
  modfile="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  k8s_minor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$modfile")"
  [[ -n "$k8s_minor" ]] || { log "cannot find helm's client-go version in $modfile"; return 1; }
  local x="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  local p
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    x+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
  done
  GOBIN="$work" run_logged "$work/build.log" go install -trimpath -ldflags "-s -w $x" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$work/helm" "$out/helm"
  log "helm $HELM_VERSION built in $((SECONDS - t0))s"
}

# The compose validator is this repo's own Go module; its cache key is the
# hash of its sources, so an edit rebuilds it.
build_compose_check() {
  local src="$E2E_DIR/tools/compose-check"
  local mod
  for mod in "github.com/compose-spec/compose-go/v2 $COMPOSE_GO_VERSION" "github.com/moby/buildkit $BUILDKIT_VERSION"; do
    if ! grep -qE "^(require )?[[:space:]]*$mod\$" "$src/go.mod"; then
      log "$src/go.mod does not require $mod (versions.env)"; return 1
    fi
  done
  local key; key="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-12)"
  local out; out="$(bin_dir compose-check "$COMPOSE_GO_VERSION-$key")"
  if [[ -x "$out/compose-check" ]]; then log "compose-check (compose-go $COMPOSE_GO_VERSION, buildkit $BUILDKIT_VERSION) cached"; return; fi
  log "building compose-check (compose-go $COMPOSE_GO_VERSION, buildkit $BUILDKIT_VERSION)"
  local t0=$SECONDS
  mkdir -p "$out"
  local work="$CACHE_DIR/src/compose-check"; mkdir -p "$work"
  # -mod=readonly: the committed go.sum must be complete.
  (cd "$src" && GOFLAGS=-buildvcs=false run_logged "$work/build.log" \
    go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/compose-check.tmp" .)
  mv "$out/compose-check.tmp" "$out/compose-check"
  log "compose-check built in $((SECONDS - t0))s"
}

compose_check_bin() {
  local src="$E2E_DIR/tools/compose-check" key
  key="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-12)"
  echo "$(bin_dir compose-check "$COMPOSE_GO_VERSION-$key")/compose-check"
}

build_actionlint() {
  local out; out="$(bin_dir actionlint "$ACTIONLINT_VERSION")"
  if [[ -x "$out/actionlint" ]]; then log "actionlint $ACTIONLINT_VERSION cached"; return; fi
  log "building actionlint $ACTIONLINT_VERSION"
  local t0=$SECONDS
  mkdir -p "$out"
  local work="$CACHE_DIR/src/actionlint-$ACTIONLINT_VERSION"; mkdir -p "$work"
  GOBIN="$work" run_logged "$work/build.log" go install -trimpath \
    -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  mv "$work/actionlint" "$out/actionlint"
  log "actionlint $ACTIONLINT_VERSION built in $((SECONDS - t0))s"
}

# The OpenTelemetry Collector, as its builder (ocb) makes one: the filelog
# receiver and the otlphttp and otlp (gRPC) exporters, nothing else. (The
# cache is keyed by what it holds: a build without otlp is not taken.)
OTELCOL_FLAVOUR="$OTELCOL_VERSION-filelog-otlphttp-otlp"
build_otelcol() {
  local out; out="$(bin_dir otelcol "$OTELCOL_FLAVOUR")"
  if [[ -x "$out/otelcol" ]]; then log "otelcol $OTELCOL_VERSION cached"; return; fi
  log "building otelcol $OTELCOL_VERSION with the collector builder (several minutes on 2 cores)"
  local t0=$SECONDS
  mkdir -p "$out"
  local work="$CACHE_DIR/src/otelcol-$OTELCOL_VERSION"; mkdir -p "$work"
  GOBIN="$work" run_logged "$work/builder-install.log" go install -trimpath \
    "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
  cat >"$work/manifest.yaml" <<YAML
dist:
  name: otelcol
  description: kascade e2e OpenTelemetry Collector (filelog to otlphttp or otlp)
  output_path: $work/dist
receivers:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/receiver/filelogreceiver $OTELCOL_CONTRIB_VERSION
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter $OTELCOL_VERSION
  - gomod: go.opentelemetry.io/collector/exporter/otlpexporter $OTELCOL_VERSION
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider $OTELCOL_STABLE_VERSION
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider $OTELCOL_STABLE_VERSION
YAML
  # The builder writes the sources and tidies them; the build is ours.
  (cd "$work" && run_logged "$work/generate.log" "$work/builder" --config "$work/manifest.yaml" --skip-compilation)
  (cd "$work/dist" && run_logged "$work/build.log" go build -trimpath -ldflags "-s -w" -o "$out/otelcol.tmp" .)
  mv "$out/otelcol.tmp" "$out/otelcol"
  log "otelcol $OTELCOL_VERSION built in $((SECONDS - t0))s"
}

# --- A real node (e2e/node.sh): kubelet, containerd, runc, CNI plugins, pause,
# and the two OCI images the node imports (busybox, pause). ---

build_kubelet() {
  local out; out="$(bin_dir kubelet "$KUBERNETES_VERSION")"
  if [[ -x "$out/kubelet" ]]; then log "kubelet $KUBERNETES_VERSION cached"; return; fi
  # Its own wrapper module: the kubelet's dependencies (cadvisor, the CRI
  # client, ...) are not in the control plane's build list.
  local work="$CACHE_DIR/src/kubelet-$KUBERNETES_VERSION"
  mkdir -p "$work" "$out"
  k8s_wrapper_module "$work" kubelet
  log "building kubelet $KUBERNETES_VERSION (several minutes on 2 cores)"
  local t0=$SECONDS
  (cd "$work" && run_logged "$work/build.log" go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$out/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv "$out/kubelet.tmp" "$out/kubelet"
  log "kubelet built in $((SECONDS - t0))s"
}

build_containerd() {
  local out; out="$(bin_dir containerd "$CONTAINERD_VERSION")"
  local bins=(containerd containerd-shim-runc-v2 ctr) b
  local missing=()
  for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || missing+=("$b"); done
  if [[ ${#missing[@]} -eq 0 ]]; then log "containerd $CONTAINERD_VERSION cached"; return; fi
  local work="$CACHE_DIR/src/containerd-$CONTAINERD_VERSION"; mkdir -p "$work" "$out"
  local m=github.com/containerd/containerd/v2
  # No cgo: the btrfs snapshotter needs libbtrfs headers, the node uses overlayfs.
  local ldflags="-s -w -X $m/version.Version=${CONTAINERD_VERSION#v} -X $m/version.Revision=module-proxy"
  local t0=$SECONDS
  for b in "${missing[@]}"; do
    log "building $b $CONTAINERD_VERSION"
    GOBIN="$work" run_logged "$work/build-$b.log" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
      -ldflags "$ldflags" "$m/cmd/$b@$CONTAINERD_VERSION"
    mv "$work/$b" "$out/$b"
  done
  log "containerd $CONTAINERD_VERSION built in $((SECONDS - t0))s"
}

# runc needs cgo (its nsenter is C); with libseccomp's headers it is built
# with the seccomp tag, as distributions ship it (the flavour keys the cache).
runc_flavour() {
  if pkg-config --exists libseccomp 2>/dev/null; then echo "$RUNC_VERSION-seccomp"; else echo "$RUNC_VERSION"; fi
}
build_runc() {
  local flavour; flavour="$(runc_flavour)"
  local out; out="$(bin_dir runc "$flavour")"
  if [[ -x "$out/runc" ]]; then log "runc $flavour cached"; return; fi
  local work="$CACHE_DIR/src/runc-$flavour"; mkdir -p "$work" "$out"
  local tags=""
  [[ "$flavour" == *-seccomp ]] || log "libseccomp-dev missing: runc without seccomp (apt-get install libseccomp-dev for it)"
  [[ "$flavour" != *-seccomp ]] || tags=seccomp
  log "building runc $flavour (cgo)"
  CGO_ENABLED=1 GOBIN="$work" run_logged "$work/build.log" go install -trimpath -tags "$tags" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
  mv "$work/runc" "$out/runc"
  log "runc $flavour built"
}

CNI_PLUGINS=(main/bridge main/loopback ipam/host-local)
build_cni() {
  local out p; out="$(bin_dir cni-plugins "$CNI_PLUGINS_VERSION")"
  local missing=()
  for p in "${CNI_PLUGINS[@]}"; do [[ -x "$out/${p#*/}" ]] || missing+=("$p"); done
  if [[ ${#missing[@]} -eq 0 ]]; then log "CNI plugins $CNI_PLUGINS_VERSION cached"; return; fi
  local work="$CACHE_DIR/src/cni-plugins-$CNI_PLUGINS_VERSION"; mkdir -p "$work" "$out"
  for p in "${missing[@]}"; do
    log "building CNI plugin ${p#*/} $CNI_PLUGINS_VERSION"
    GOBIN="$work" run_logged "$work/build-${p#*/}.log" go install -trimpath \
      -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
      "github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"
    mv "$work/${p#*/}" "$out/${p#*/}"
  done
}

# The pause binary, compiled as Kubernetes' build/pause/Makefile does it.
build_pause() {
  local out; out="$(bin_dir pause "$PAUSE_VERSION-$KUBERNETES_VERSION")"
  if [[ -x "$out/pause" ]]; then log "pause $PAUSE_VERSION cached"; return; fi
  mkdir -p "$out"
  local dir
  dir="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  log "compiling pause $PAUSE_VERSION from $dir/build/pause/linux/pause.c"
  gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-$KUBERNETES_VERSION" \
    -o "$out/pause.tmp" "$dir/build/pause/linux/pause.c"
  strip "$out/pause.tmp"
  mv "$out/pause.tmp" "$out/pause"
}

# The node's two images as OCI archives (e2e/tools/oci-image.py), named
# kascade.local/...: nothing on this node can pull from a registry.
# (A tag takes no '+': the upstream version of Debian's package names it.)
BUSYBOX_TAG="${BUSYBOX_DEB_VERSION#*:}"; BUSYBOX_IMAGE="kascade.local/busybox:${BUSYBOX_TAG%%-*}"
PAUSE_IMAGE="kascade.local/pause:$PAUSE_VERSION"
images_dir() {
  local key
  key="$(printf '%s\n' "$BUSYBOX_IMAGE" "$BUSYBOX_DEB_VERSION" "$PAUSE_VERSION" "$KUBERNETES_VERSION" | cat - "$E2E_DIR/tools/oci-image.py" | sha256sum | cut -c1-12)"
  echo "$CACHE_DIR/node-images-$key"
}
build_images() {
  local out; out="$(images_dir)"
  if [[ -f "$out/busybox.tar" && -f "$out/pause.tar" ]]; then log "node images cached"; return; fi
  local work="$CACHE_DIR/src/node-images"; rm -rf "$work"; mkdir -p "$work/busybox/bin" "$work/pause" "$out"
  log "busybox-static $BUSYBOX_DEB_VERSION from Debian"
  (cd "$work" && run_logged "$work/apt.log" apt-get download "busybox-static=$BUSYBOX_DEB_VERSION")
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
  cp "$work/deb/bin/busybox" "$work/busybox/bin/busybox"
  local applet
  for applet in $("$work/busybox/bin/busybox" --list); do
    [[ "$applet" == busybox ]] || ln -s busybox "$work/busybox/bin/$applet"
  done
  mkdir -p "$work/busybox/tmp" "$work/busybox/etc"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$work/busybox/etc/passwd"
  echo 'root:x:0:' >"$work/busybox/etc/group"
  cp "$(bin_dir pause "$PAUSE_VERSION-$KUBERNETES_VERSION")/pause" "$work/pause/pause"
  python3 "$E2E_DIR/tools/oci-image.py" --rootfs "$work/busybox" --name "$BUSYBOX_IMAGE" \
    --cmd /bin/sh --env PATH=/bin -o "$out/busybox.tar.tmp" >&2
  python3 "$E2E_DIR/tools/oci-image.py" --rootfs "$work/pause" --name "$PAUSE_IMAGE" \
    --entrypoint /pause --user 65535:65535 -o "$out/pause.tar.tmp" >&2
  mv "$out/busybox.tar.tmp" "$out/busybox.tar"; mv "$out/pause.tar.tmp" "$out/pause.tar"
  log "node images: $BUSYBOX_IMAGE, $PAUSE_IMAGE in $out"
}

# Everything a real node needs, linked into one directory; prints
# NODE_BIN=<dir>, NODE_IMAGES=<dir>, CNI_BIN=<dir>, BUSYBOX_IMAGE=, PAUSE_IMAGE=.
build_node() {
  build_kubelet; build_containerd; build_runc; build_cni; build_pause; build_images
  local bin="$CACHE_DIR/node-bin" b
  mkdir -p "$bin"
  ln -sf "$(bin_dir kubelet "$KUBERNETES_VERSION")/kubelet" "$bin/kubelet"
  for b in containerd containerd-shim-runc-v2 ctr; do ln -sf "$(bin_dir containerd "$CONTAINERD_VERSION")/$b" "$bin/$b"; done
  ln -sf "$(bin_dir runc "$(runc_flavour)")/runc" "$bin/runc"
  echo "NODE_BIN=$bin"
  echo "CNI_BIN=$(bin_dir cni-plugins "$CNI_PLUGINS_VERSION")"
  echo "NODE_IMAGES=$(images_dir)"
  echo "BUSYBOX_IMAGE=$BUSYBOX_IMAGE"
  echo "PAUSE_IMAGE=$PAUSE_IMAGE"
}

link_bins() {
  local bin="$CACHE_DIR/bin"
  mkdir -p "$bin"
  ln -sf "$(bin_dir etcd "$ETCD_VERSION")/etcd" "$bin/etcd"
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    ln -sf "$(bin_dir kubernetes "$KUBERNETES_VERSION")/$b" "$bin/$b"
  done
  ln -sf "$(bin_dir kwok "$KWOK_VERSION")/kwok" "$bin/kwok"
  ln -sf "$(bin_dir jaeger "$JAEGER_RELEASE")/jaeger" "$bin/jaeger"
  ln -sf "$(bin_dir helm "$HELM_VERSION")/helm" "$bin/helm"
  ln -sf "$(compose_check_bin)" "$bin/compose-check"
  echo "KASCADE_E2E_BIN=$bin"
}

what="${1:-all}"
case "$what" in
  etcd) build_etcd ;;
  kubernetes) build_kubernetes ;;
  kwok) build_kwok ;;
  jaeger) build_jaeger ;;
  helm) build_helm; echo "HELM=$(bin_dir helm "$HELM_VERSION")/helm" ;;
  compose-check) build_compose_check; echo "COMPOSE_CHECK=$(compose_check_bin)" ;;
  actionlint) build_actionlint; echo "ACTIONLINT=$(bin_dir actionlint "$ACTIONLINT_VERSION")/actionlint" ;;
  otelcol) build_otelcol; echo "OTELCOL=$(bin_dir otelcol "$OTELCOL_FLAVOUR")/otelcol" ;;
  kubelet) build_kubelet ;;
  containerd) build_containerd ;;
  runc) build_runc ;;
  cni) build_cni ;;
  pause) build_pause ;;
  node) build_node ;;
  all) build_etcd; build_kwok; build_jaeger; build_kubernetes; build_helm; build_compose_check; link_bins ;;
  *) echo "usage: $0 [etcd|kubernetes|kwok|jaeger|helm|compose-check|actionlint|otelcol|node|kubelet|containerd|runc|cni|pause|all]" >&2; exit 2 ;;
esac
