{{/* Where the chart's namespaced objects go: namespace.name, or the release's namespace. */}}
{{- define "kokumi.namespace" -}}
{{ .Values.namespace.name | default .Release.Namespace }}
{{- end -}}

{{/* The labels of a Helm release, on every object of the chart (beside the pieces' own). */}}
{{- define "kokumi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The image of the manager and the UI: the repository at the tag, by default the appVersion. */}}
{{- define "kokumi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The manager's flags beyond those of deploy/manager/deployment.yaml, one "- --flag" a line. */}}
{{- define "kokumi.managerArgs" -}}
{{- $m := .Values.manager -}}
{{- if gt (int $m.shards) 1 }}
- --shards={{ $m.shards }}
{{- end }}
{{- if $m.maxShards }}
- --max-shards={{ $m.maxShards }}
{{- end }}
{{- if ne .Values.argocd.namespace "argocd" }}
- --argocd-namespace={{ .Values.argocd.namespace }}
{{- end }}
{{- if eq $m.secretsScope "cluster" }}
- --secrets-scope=cluster
{{- end }}
{{- range $m.probeDenyCIDRs }}
- --probe-deny-cidr={{ . }}
{{- end }}
{{- range $m.probeAllowCIDRs }}
- --probe-allow-cidr={{ . }}
{{- end }}
{{- if ne (int $m.maxContextsPerSecret) 100 }}
- --max-contexts-per-secret={{ $m.maxContextsPerSecret }}
{{- end }}
{{- if ne (int $m.maxClustersPerSource) 1000 }}
- --max-clusters-per-source={{ $m.maxClustersPerSource }}
{{- end }}
{{- with .Values.argocd.carryLabels }}
- --carry-labels={{ join "," . }}
{{- end }}
{{- with .Values.argocd.carryAnnotations }}
- --carry-annotations={{ join "," . }}
{{- end }}
{{- end -}}
