{{/*
The name of every object: the release's name when it says mcptrace,
else RELEASE-mcptrace; 63 characters at most (a DNS label).
*/}}
{{- define "mcptrace.fullname" -}}
{{- if contains "mcptrace" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-mcptrace" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The labels that select the agent's pods. app.kubernetes.io/name is the
one deploy/prometheus/kubernetes.yml keeps pods by, as for the kustomize
base.
*/}}
{{- define "mcptrace.selectorLabels" -}}
app.kubernetes.io/name: mcptrace
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "mcptrace.labels" -}}
{{ include "mcptrace.selectorLabels" . }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The agent's configuration file, config.yaml. */}}
{{- define "mcptrace.config" -}}
{{- if .Values.config -}}
{{ toYaml .Values.config }}
{{- else -}}
{{ .Files.Get "files/config.yaml" | trimSuffix "\n" }}
{{- end -}}
{{- end -}}
