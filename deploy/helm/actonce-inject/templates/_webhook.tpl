{{- /* The MutatingWebhookConfiguration; caBundle given (the chart's CA), or written by
  cert-manager's CA injector from the Certificate the annotation names. */}}
{{- define "actonce-inject.webhook" -}}
{{- $top := .top -}}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {{ include "actonce-inject.name" $top }}
  labels:
    {{- include "actonce-inject.labels" $top | nindent 4 }}
  {{- if not .caBundle }}
  annotations:
    cert-manager.io/inject-ca-from: {{ $top.Release.Namespace }}/{{ include "actonce-inject.name" $top }}
  {{- end }}
webhooks:
  - name: inject.actonce.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {{ $top.Values.failurePolicy }}
    matchPolicy: Equivalent
    reinvocationPolicy: Never
    timeoutSeconds: {{ $top.Values.timeoutSeconds }}
    namespaceSelector:
      {{- toYaml $top.Values.namespaceSelector | nindent 6 }}
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
        scope: Namespaced
    clientConfig:
      service:
        name: {{ include "actonce-inject.name" $top }}
        namespace: {{ $top.Release.Namespace }}
        path: /inject
        port: 443
      {{- if .caBundle }}
      caBundle: {{ .caBundle }}
      {{- end }}
{{- end }}
