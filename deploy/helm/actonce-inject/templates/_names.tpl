{{- define "actonce-inject.name" -}}{{ .Release.Name }}-actonce-inject{{- end }}
{{- define "actonce-inject.secret" -}}{{ include "actonce-inject.name" . }}-tls{{- end }}
{{- define "actonce-inject.host" -}}{{ include "actonce-inject.name" . }}.{{ .Release.Namespace }}.svc{{- end }}
{{- define "actonce-inject.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end }}
{{- define "actonce-inject.labels" -}}
app.kubernetes.io/name: actonce-inject
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: actonce
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
{{- define "actonce-inject.selector" -}}
app.kubernetes.io/name: actonce-inject
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
