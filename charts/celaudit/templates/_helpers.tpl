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


{{/* The name of the operator's Deployment, or with sharding its StatefulSet. */}}
{{- define "celaudit.managerName" -}}
{{ include "celaudit.fullname" . }}-controller-manager
{{- end }}

{{/* "true" when the operator runs as a sharded StatefulSet: sharding.enabled with more than one replica. */}}
{{- define "celaudit.sharded" -}}
{{- if and .Values.sharding.enabled (gt (int .Values.replicaCount) 1) }}true{{- end }}
{{- end }}

{{/* The operator's pod template, called with (dict "root" $ "sharded" bool). The Deployment and the sharded
StatefulSet both render it, so that they cannot drift: sharded adds only the membership's argument
(--shard-statefulset) and the POD_NAME and POD_NAMESPACE it reads. */}}
{{- define "celaudit.podTemplate" -}}
{{- $sharded := .sharded }}
{{- with .root -}}
metadata:
  annotations:
    kubectl.kubernetes.io/default-container: manager
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  labels:
    {{- include "celaudit.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  containers:
  - name: manager
    image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command:
    - /celaudit
    args:
    - --health-probe-bind-address=:8081
    - --metrics-bind-address=:8443
    {{- if include "celaudit.leaderElect" . }}
    - --leader-elect
    {{- with .Values.leaderElection }}
    {{- if not (kindIs "invalid" .leaseDuration) }}
    - --leader-election-lease-duration={{ .leaseDuration }}
    {{- end }}
    {{- if not (kindIs "invalid" .renewDeadline) }}
    - --leader-election-renew-deadline={{ .renewDeadline }}
    {{- end }}
    {{- if not (kindIs "invalid" .retryPeriod) }}
    - --leader-election-retry-period={{ .retryPeriod }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- if .Values.admissionPolicies.manage }}
    # Registers the ValidatingAdmissionPolicies of AuditPolicies in Warn and Deny (the
    # admission-policy-manager ClusterRole).
    - --manage-admission-policies
    {{- end }}
    {{- with .Values.admissionPolicies.exempt }}
    {{- range $kind, $list := . }}
    {{- range $list }}
    {{- if contains "," . }}
    {{- fail (printf "admissionPolicies.exempt.%s: %q holds a comma, which the comma-separated flag cannot pass" $kind .) }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- with .namespaces }}
    - --exempt-namespaces={{ join "," . }}
    {{- end }}
    {{- with .resources }}
    - --exempt-resources={{ join "," . }}
    {{- end }}
    {{- with .users }}
    - --exempt-users={{ join "," . }}
    {{- end }}
    {{- with .groups }}
    - --exempt-groups={{ join "," . }}
    {{- end }}
    {{- end }}
    {{- if include "celaudit.openReports" . }}
    - --report-api={{ .Values.reports.api }}
    {{- end }}
    {{- $results := include "celaudit.reportResults" . }}
    {{- if or $results (not (kindIs "invalid" .Values.reports.results)) }}
    - --report-results={{ $results }}
    {{- end }}
    {{- with .Values.reports }}
    {{- if not (kindIs "invalid" .maxResultsPerReport) }}
    - --max-results-per-report={{ int64 .maxResultsPerReport }}
    {{- end }}
    {{- if not (kindIs "invalid" .maxReportBytes) }}
    - --max-report-bytes={{ int64 .maxReportBytes }}
    {{- end }}
    {{- end }}
    {{- with .Values.audit }}
    {{- if not (kindIs "invalid" .workers) }}
    - --workers={{ int64 .workers }}
    {{- end }}
    {{- if not (kindIs "invalid" .pageSize) }}
    - --page-size={{ int64 .pageSize }}
    {{- end }}
    {{- if not (kindIs "invalid" .resyncPeriod) }}
    - --resync-period={{ .resyncPeriod }}
    {{- end }}
    {{- if not (kindIs "invalid" .excludeCRDGroups) }}
    - --exclude-crd-groups={{ if kindIs "slice" .excludeCRDGroups }}{{ join "," .excludeCRDGroups }}{{ else }}{{ .excludeCRDGroups }}{{ end }}
    {{- end }}
    {{- if .secrets }}
    # Verdicts on Secrets tell their readers one bit of each Secret's content.
    - --audit-secrets
    {{- end }}
    {{- if eq .mutatingPolicies false }}
    - --audit-mutating-policies=false
    {{- end }}
    {{- end }}
    {{- with .Values.kubeAPI }}
    {{- if not (kindIs "invalid" .qps) }}
    - --kube-api-qps={{ .qps }}
    {{- end }}
    {{- if not (kindIs "invalid" .burst) }}
    - --kube-api-burst={{ int64 .burst }}
    {{- end }}
    {{- end }}
    {{- with .Values.logLevel }}
    - --zap-log-level={{ . }}
    {{- end }}
    {{- if $sharded }}
    # This member's share of the audit: its ordinal in the StatefulSet (from POD_NAME) and the StatefulSet's
    # replicas, watched.
    - --shard-statefulset={{ include "celaudit.managerName" . }}
    {{- end }}
    {{- range .Values.extraArgs }}
    - {{ . | quote }}
    {{- end }}
    env:
    # Lets the Go garbage collector work harder as the heap nears the container's memory limit instead
    # of the container being OOM-killed.
    - name: GOMEMLIMIT
      valueFrom:
        resourceFieldRef:
          containerName: manager
          resource: limits.memory
    {{- if $sharded }}
    # The member's name (its ordinal) and namespace, read by --pod-name and --pod-namespace.
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    ports:
    - name: metrics
      containerPort: 8443
      protocol: TCP
    - name: health
      containerPort: 8081
      protocol: TCP
    {{- with .Values.securityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    livenessProbe:
      httpGet:
        path: /healthz
        port: 8081
      initialDelaySeconds: 15
      periodSeconds: 20
    readinessProbe:
      httpGet:
        path: /readyz
        port: 8081
      initialDelaySeconds: 5
      periodSeconds: 10
    {{- with .Values.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  serviceAccountName: {{ include "celaudit.serviceAccountName" . }}
  terminationGracePeriodSeconds: 10
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
