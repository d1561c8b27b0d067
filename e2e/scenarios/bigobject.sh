#!/usr/bin/env bash
# Oversized writes among small ones (issue 10, defect 2): a ConfigMap of
# almost 1 MB (the most the apiserver accepts: 1 MiB of data) is replaced
# three times, each time with a new value, while 50 small ConfigMaps are
# created — all within about a second, so the apiserver sends them in the
# same webhook batches. The diffs hold the value before and after: ~6 MB in
# one export batch unless values are capped and batches bounded by bytes.
source "$(dirname "$0")/lib.sh"
NS=big-demo
fresh_namespace "$NS"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
blob() { head -c 999000 /dev/zero | tr '\0' "$1" >"$work/blob"; }
say "configmap big (999000-byte value)"
blob a
k create configmap big -n "$NS" --from-file=blob="$work/blob" >/dev/null
for i in $(seq -w 0 49); do
  printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: small-%s}\ndata: {n: "%s"}\n' "$i" "$i"
done >"$work/small.yaml"
say "three replacements of big while 50 small configmaps are created"
for c in b c d; do
  blob "$c"; cp "$work/blob" "$work/blob-$c"
done
# One after the other (kubectl replace sends the resourceVersion it read, so
# concurrent ones conflict), beside the creates.
(
  for c in b c d; do
    k create configmap big -n "$NS" --from-file=blob="$work/blob-$c" --dry-run=client -o yaml \
      | k replace -f - >/dev/null
  done
) &
replaced=$!
k apply -n "$NS" -f "$work/small.yaml" >/dev/null
wait "$replaced"
[[ "$(k get configmaps -n "$NS" -o name | grep -c small-)" == 50 ]] || { say "not all small configmaps exist"; exit 1; }
say "done"
