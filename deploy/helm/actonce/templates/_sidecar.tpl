{{/*
actonce as a native sidecar, for your chart's own workloads. Each template takes the root
context (.), reads `.Values.actonce` (this chart's values.yaml holds the defaults), and renders
what the kustomize Component (deploy/kubernetes/components/sidecar) adds, field for field:

  metadata.labels:        {{- include "actonce.podLabels" . | nindent 8 }}
  metadata.annotations:   {{- include "actonce.podAnnotations" . | nindent 8 }}
  spec.initContainers:    {{- include "actonce.sidecar" . | nindent 8 }}
  spec.volumes:           {{- include "actonce.volumes" . | nindent 8 }}
  your agent's env:       {{- include "actonce.agentEnv" . | nindent 12 }}
  its volumeMounts:       {{- include "actonce.agentVolumeMounts" . | nindent 12 }}
  a template of its own:  {{ include "actonce.configMap" . }}
  and one more:           {{ include "actonce.networkPolicy" . }}

actonce.networkPolicy is the kustomize base's NetworkPolicy (deploy/kubernetes/base): the
pods that carry the sidecar take connections on the metrics port from Prometheus alone, and
nothing else from any other pod. Rendered unless `networkPolicy.enabled` is false.
*/}}

{{- define "actonce.podLabels" -}}
actonce/sidecar: "true"
{{- end -}}

{{- define "actonce.podAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.actonce.metricsPort | quote }}
prometheus.io/path: /metrics
{{- /* A changed setting changes the pod template: the pods roll and read it. */}}
checksum/actonce-settings: {{ include "actonce.configMap" . | sha256sum }}
{{- end -}}

{{- /* The settings' ConfigMap: the release's own unless configMapName names another. */}}
{{- define "actonce.configMapName" -}}
{{- .Values.actonce.configMapName | default (printf "%s-actonce" .Release.Name) -}}
{{- end -}}

{{- define "actonce.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "actonce.configMapName" . }}
data:
  {{- range $name, $value := .Values.actonce.settings }}
  {{ $name }}: {{ $value | toString | quote }}
  {{- end }}
{{- end -}}

{{- define "actonce.networkPolicy" -}}
{{- $v := .Values.actonce -}}
{{- if $v.networkPolicy.enabled }}
# Who reaches the pods that carry the sidecar. The agent API is on loopback, out of every
# network's reach; the probes' port needs no rule (an isolated pod still takes connections
# from its own node, where the kubelet probes from). Ingress only: the pod's egress is the
# agent's too, which only you know. Anything else that must reach your agent: a rule in
# networkPolicy.extraIngress.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ $v.networkPolicy.name | default (printf "%s-actonce" .Release.Name) }}
spec:
  podSelector:
    matchLabels:
      {{- include "actonce.podLabels" . | nindent 6 }}
  policyTypes:
    - Ingress
  ingress:
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ $v.networkPolicy.prometheus.namespace }}
          podSelector:
            matchLabels:
              {{- toYaml $v.networkPolicy.prometheus.podLabels | nindent 14 }}
      ports:
        - port: {{ $v.metricsPort }}
          protocol: TCP
    {{- with $v.networkPolicy.extraIngress }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end -}}

{{- define "actonce.sidecar" -}}
{{- $v := .Values.actonce -}}
- name: actonce
  image: "{{ $v.image.repository }}:{{ $v.image.tag }}"
  imagePullPolicy: {{ $v.image.pullPolicy }}
  restartPolicy: Always
  envFrom:
    - configMapRef:
        name: {{ include "actonce.configMapName" . }}
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    # Bound to the pod's own address: the kubelet probes it, Prometheus scrapes it.
    - name: ACTONCE_HEALTH_LISTEN
      value: "$(POD_IP):{{ $v.healthPort }}"
    - name: ACTONCE_METRICS_LISTEN
      value: "$(POD_IP):{{ $v.metricsPort }}"
    - name: ACTONCE_API_TOKEN_FILE
      value: /var/run/secrets/actonce/api/token
    - name: ACTONCE_STORE_TOKEN_FILE
      value: /var/run/secrets/actonce/store/token
    - name: ACTONCE_STORE_TLS_CA
      value: /var/run/secrets/actonce/store/ca.crt
    {{- if $v.secrets.auditDsn }}
    - name: ACTONCE_AUDIT_DSN_FILE
      value: /var/run/secrets/actonce/audit/dsn
    {{- end }}
    - name: ACTONCE_DATA_DIR
      value: /var/lib/actonce
  ports:
    - name: probes
      containerPort: {{ $v.healthPort }}
      protocol: TCP
    - name: metrics
      containerPort: {{ $v.metricsPort }}
      protocol: TCP
  startupProbe:
    grpc:
      port: {{ $v.healthPort }}
    periodSeconds: 1
    failureThreshold: 60
  readinessProbe:
    grpc:
      port: {{ $v.healthPort }}
    periodSeconds: 5
    failureThreshold: 2
  livenessProbe:
    grpc:
      port: {{ $v.healthPort }}
      service: liveness
    periodSeconds: 10
    timeoutSeconds: 2
    failureThreshold: 3
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: actonce-data
      mountPath: /var/lib/actonce
    - name: actonce-tmp
      mountPath: /tmp
    - name: actonce-api-token
      mountPath: /var/run/secrets/actonce/api
      readOnly: true
    - name: actonce-store-credentials
      mountPath: /var/run/secrets/actonce/store
      readOnly: true
    {{- if $v.secrets.auditDsn }}
    - name: actonce-audit-dsn
      mountPath: /var/run/secrets/actonce/audit
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "actonce.volumes" -}}
{{- $v := .Values.actonce -}}
- name: actonce-data
  emptyDir:
    sizeLimit: 1Gi
- name: actonce-tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
# 0444: the agent, which mounts the API token too, may run as another user than the sidecar.
- name: actonce-api-token
  secret:
    secretName: {{ $v.secrets.apiToken }}
    defaultMode: 0444
    items:
      - key: token
        path: token
- name: actonce-store-credentials
  secret:
    secretName: {{ $v.secrets.store }}
    defaultMode: 0444
    items:
      - key: token
        path: token
      - key: ca.crt
        path: ca.crt
{{- if $v.secrets.auditDsn }}
- name: actonce-audit-dsn
  secret:
    secretName: {{ $v.secrets.auditDsn }}
    defaultMode: 0444
    items:
      - key: dsn
        path: dsn
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "actonce.agentEnv" -}}
{{- $v := .Values.actonce -}}
- name: ACTONCE_TARGET
  value: {{ $v.settings.ACTONCE_LISTEN | quote }}
- name: ACTONCE_API_TOKEN_FILE
  value: /var/run/secrets/actonce/api/token
{{- end -}}

{{- define "actonce.agentVolumeMounts" -}}
- name: actonce-api-token
  mountPath: /var/run/secrets/actonce/api
  readOnly: true
{{- end -}}
