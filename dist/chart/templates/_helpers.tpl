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

{{/* image is "repository:tag" of an image value, the tag defaulting to the appVersion. */}}
{{- define "sluice.image" -}}{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}{{- end -}}

{{/* scheduling renders nodeSelector, tolerations, priorityClassName and a non-empty affinity
of a component's values. */}}
{{- define "sluice.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{- define "sluice.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
