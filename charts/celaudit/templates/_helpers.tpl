{{/* The chart name, or nameOverride. */}}
{{- define "celaudit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name: fullnameOverride, the release name when it contains the chart name
(so `helm install celaudit` names things like config/default does), or "<release>-<name>". */}}
{{- define "celaudit.fullname" -}}
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

{{- define "celaudit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "celaudit.labels" -}}
helm.sh/chart: {{ include "celaudit.chart" . }}
{{ include "celaudit.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: celaudit
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "celaudit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "celaudit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end }}

{{- define "celaudit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-controller-manager" (include "celaudit.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's ServiceAccount as a subject of a binding. */}}
{{- define "celaudit.subject" -}}
- kind: ServiceAccount
  name: {{ include "celaudit.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{- define "celaudit.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{- end }}
{{- end }}

{{/* "true" when the operator writes openreports.io reports (values.schema.json allows only wgpolicy,
openreports and both). */}}
{{- define "celaudit.openReports" -}}
{{- if ne .Values.reports.api "wgpolicy" }}true{{- end }}
{{- end }}

{{/* The value of --report-results, or empty when the operator's default stands. */}}
{{- define "celaudit.reportResults" -}}
{{- $r := .Values.reports.results }}
{{- if kindIs "slice" $r }}
{{- join "," $r }}
{{- else if not (kindIs "invalid" $r) }}
{{- $r }}
{{- else if .Values.policyReporter.listPasses }}
{{- "pass,fail,warn,error,skip" }}
{{- end }}
{{- end }}

{{/* Whether a looked-up object was installed by this release (Helm records it in these annotations). */}}
{{- define "celaudit.ownedByRelease" -}}
{{- $a := .obj.metadata.annotations | default dict }}
{{- if and (eq (get $a "meta.helm.sh/release-name") .root.Release.Name) (eq (get $a "meta.helm.sh/release-namespace") .root.Release.Namespace) }}true{{- end }}
{{- end }}
