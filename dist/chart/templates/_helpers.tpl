{{/* Names are those of config/default (prefix sluice-): the RBAC rules name the webhook
configuration and the certificate Secret, so one release per cluster. */}}
{{- define "sluice.name" -}}sluice{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/part-of: sluice
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/component: manager
app.kubernetes.io/name: sluice
{{- end -}}

{{- define "sluice.certManager" -}}{{ eq .Values.webhook.certificateMode "cert-manager" }}{{- end -}}
