{{/* Name of the chart, overridable. */}}
{{- define "dgx-pixels-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name, plus the chart name unless the release name contains it. */}}
{{- define "dgx-pixels-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the pods (never change them on upgrade: selectors are immutable). */}}
{{- define "dgx-pixels-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dgx-pixels-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "dgx-pixels-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dgx-pixels-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: dgx-pixels
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "dgx-pixels-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dgx-pixels-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}


{{/* The node directory to mount for a trace directory: itself, or for a glob the directory above
     its first wildcard (a glob with none above it would mount the node's root: refused). */}}
{{- define "dgx-pixels-exporter.traceMount" -}}
{{- if regexMatch "[*?]" . -}}
{{- $prefix := regexFind "^[^*?]*/" . | trimSuffix "/" -}}
{{- if not $prefix -}}
{{- fail (printf "trace.directories: %s has no fixed directory above its first wildcard to mount" .) -}}
{{- end -}}
{{- $prefix -}}
{{- else -}}
{{- . | trimSuffix "/" -}}
{{- end -}}
{{- end }}

{{/* Whether the pod has volumes or mounts besides extraVolumes. */}}
{{- define "dgx-pixels-exporter.hasVolumes" -}}
{{- if or .Values.config .Values.dcgm.fieldList .Values.webConfig.secretName .Values.podResources.enabled .Values.kmsg.enabled .Values.simulate (and .Values.trace.enabled .Values.trace.directories) -}}
true
{{- end -}}
{{- end }}

{{/*
Whether pod labels are watched from the API server (and the RBAC and token that takes).
*/}}
{{- define "dgx-pixels-exporter.podLabels" -}}
{{- if and .Values.podResources.enabled .Values.podResources.podLabels.keys -}}
true
{{- end -}}
{{- end }}
