{{/* Chart name, truncated for label values. */}}
{{- define "kascade.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release name, plus the chart name unless the release already contains it. */}}
{{- define "kascade.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kascade.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; call with (dict "ctx" $ "component" "collector"). */}}
{{- define "kascade.labels" -}}
helm.sh/chart: {{ include "kascade.chart" .ctx }}
{{ include "kascade.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: kascade
{{- end -}}

{{- define "kascade.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kascade.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "kascade.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kascade.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kascade.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Parses an env file of the chart (KEY=VALUE lines, # comments) into a dict
rendered as YAML; call with (dict "ctx" $ "file" "files/collect.env").
*/}}
{{- define "kascade.envFile" -}}
{{- $out := dict -}}
{{- $content := .ctx.Files.Get .file -}}
{{- if not $content -}}
{{- fail (printf "%s is missing or empty (a symlink to deploy/config/; package the chart from the repository)" .file) -}}
{{- end -}}
{{- range $line := splitList "\n" $content -}}
{{- $l := trim $line -}}
{{- if and $l (not (hasPrefix "#" $l)) -}}
{{- if not (regexMatch "^[A-Z_][A-Z0-9_]*=" $l) -}}
{{- fail (printf "%s: not a KEY=VALUE line: %q" $.file $l) -}}
{{- end -}}
{{- $kv := splitn "=" 2 $l -}}
{{- $_ := set $out $kv._0 $kv._1 -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "kascade.rawJaegerName" -}}
{{- printf "%s-raw-jaeger" (include "kascade.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kascade.otlpEndpoint" -}}
{{- if .Values.collector.otlp.endpoint -}}
{{- .Values.collector.otlp.endpoint -}}
{{- else if .Values.rawJaeger.enabled -}}
{{- if eq .Values.collector.otlp.protocol "http" -}}
{{- printf "http://%s:4318" (include "kascade.rawJaegerName" .) -}}
{{- else -}}
{{- printf "http://%s:4317" (include "kascade.rawJaegerName" .) -}}
{{- end -}}
{{- else -}}
{{- fail "collector.otlp.endpoint is required when rawJaeger.enabled is false" -}}
{{- end -}}
{{- end -}}

{{- define "kascade.rawJaegerUrl" -}}
{{- if .Values.frontend.rawJaegerUrl -}}
{{- .Values.frontend.rawJaegerUrl -}}
{{- else if .Values.rawJaeger.enabled -}}
{{- printf "http://%s:16686" (include "kascade.rawJaegerName" .) -}}
{{- else -}}
{{- fail "frontend.rawJaegerUrl is required when rawJaeger.enabled is false" -}}
{{- end -}}
{{- end -}}

{{/* The raw Jaeger's remote-storage gRPC endpoint (e2e/jaeger/raw.yaml's
remote_storage extension): raw reads many traces per request. Empty when the
raw Jaeger is not the bundled one and no rawJaegerGrpcUrl is set: the
frontend then reads over the query HTTP API. */}}
{{- define "kascade.rawJaegerGrpcUrl" -}}
{{- if .Values.frontend.rawJaegerGrpcUrl -}}
{{- .Values.frontend.rawJaegerGrpcUrl -}}
{{- else if and .Values.rawJaeger.enabled (not .Values.frontend.rawJaegerUrl) -}}
{{- printf "http://%s:17271" (include "kascade.rawJaegerName" .) -}}
{{- end -}}
{{- end -}}

{{- define "kascade.webhookTlsSecret" -}}
{{- default (printf "%s-webhook-tls" (include "kascade.fullname" .)) .Values.collector.tls.secretName -}}
{{- end -}}

{{- define "kascade.webhookTokenSecret" -}}
{{- default (printf "%s-webhook-token" (include "kascade.fullname" .)) .Values.collector.webhookToken.secretName -}}
{{- end -}}

{{- define "kascade.etcdName" -}}
{{- printf "%s-span-cache" (include "kascade.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kascade.etcdEndpoints" -}}
{{- if .Values.spanCache.etcd.endpoints -}}
{{- join "," .Values.spanCache.etcd.endpoints -}}
{{- else -}}
{{- printf "http://%s:2379" (include "kascade.etcdName" .) -}}
{{- end -}}
{{- end -}}

{{/* A list of strings as CEL list items: 'a', 'b'. */}}
{{- define "kascade.quotedList" -}}
{{- $items := list -}}
{{- range . }}{{- $items = append $items (printf "'%s'" (. | replace "'" "")) -}}{{- end -}}
{{- join ", " $items -}}
{{- end -}}
