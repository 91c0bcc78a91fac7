{{/* Names: <release>-svc, or the release name when it already holds "svc"; 63 characters at most. */}}
{{- define "svc.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "svc.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "svc.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "svc.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Whether some shard group is a consensus group ("true" or ""). */}}
{{- define "svc.hasConsensus" -}}
{{- range .Values.shards -}}
{{- if gt (int (.members | default 0)) 0 }}true{{ end -}}
{{- end -}}
{{- end -}}

{{- define "svc.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else -}}
{{- printf "%s-keys" (include "svc.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "svc.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The stable address of pod <group>-<ordinal>: "<fullname>-<group>-<i>.<fullname>-<group>.<ns>.svc.<domain>". Call with (list $ group ordinal). */}}
{{- define "svc.podHost" -}}
{{- $ := index . 0 -}}
{{- $group := printf "%s-%s" (include "svc.fullname" $) (index . 1) -}}
{{- printf "%s-%v.%s.%s.svc.%s" $group (index . 2) $group $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/* The DNS names the TLS Secret's certificate must be valid for, comma-separated: a wildcard for each
headless Service (every pod of a shard group, and the standby, is one label under it: a member's address
in SVC_RAFT_MEMBERS, a leader's in SVC_LEADER_URL), each consensus group's -any Service, the coordinator's
and the routers' Services. */}}
{{- define "svc.tlsNames" -}}
{{- $ := . -}}
{{- $suffix := printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- $full := include "svc.fullname" . -}}
{{- $names := list -}}
{{- range .Values.shards -}}
{{- $names = append $names (printf "*.%s-%s.%s" $full .name $suffix) -}}
{{- if gt (int (.members | default 0)) 0 -}}
{{- $names = append $names (printf "%s-%s-any.%s" $full .name $suffix) -}}
{{- end -}}
{{- end -}}
{{- if gt (int .Values.standby.count) 0 -}}
{{- $names = append $names (printf "*.%s-standby.%s" $full $suffix) -}}
{{- end -}}
{{- $names = append $names (printf "%s-coordinator.%s" $full $suffix) -}}
{{- $names = append $names (printf "%s-router.%s" $full $suffix) -}}
{{ join "," $names }}
{{- end -}}

{{/* A replica pod's StatefulSet is <group>-replica, under the group's Service. Call with (list $ group ordinal). */}}
{{- define "svc.replicaHost" -}}
{{- $ := index . 0 -}}
{{- $group := printf "%s-%s" (include "svc.fullname" $) (index . 1) -}}
{{- printf "%s-replica-%v.%s.%s.svc.%s" $group (index . 2) $group $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/* A consensus group's read replica: the StatefulSet <group>-replica-m<member it follows>, under the group's
Service. Call with (list $ group member ordinal). */}}
{{- define "svc.memberReplicaHost" -}}
{{- $ := index . 0 -}}
{{- $group := printf "%s-%s" (include "svc.fullname" $) (index . 1) -}}
{{- printf "%s-replica-m%v-%v.%s.%s.svc.%s" $group (index . 2) (index . 3) $group $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/* SVC_CLUSTER_SHARDS: in the order of .Values.shards (shard ids 0, 1, ...), a leader group's leader, or a
consensus group's Service over its members (<fullname>-<group>-any), by REST URL. */}}
{{- define "svc.shardUrls" -}}
{{- $ := . -}}
{{- $urls := list -}}
{{- range .Values.shards -}}
{{- if gt (int (.members | default 0)) 0 -}}
{{- $urls = append $urls (printf "%s://%s-%s-any.%s.svc.%s:6333" (include "svc.scheme" $) (include "svc.fullname" $) .name $.Release.Namespace $.Values.clusterDomain) -}}
{{- else -}}
{{- $urls = append $urls (printf "%s://%s:6333" (include "svc.scheme" $) (include "svc.podHost" (list $ .name 0))) -}}
{{- end -}}
{{- end -}}
[{{ join "," $urls }}]
{{- end -}}

{{/* SVC_CLUSTER_REPLICAS: <shard index>=<replica REST URL>, for every read replica. */}}
{{- define "svc.replicaUrls" -}}
{{- $ := . -}}
{{- $pairs := list -}}
{{- range $i, $s := .Values.shards -}}
{{- $members := int ($s.members | default 0) -}}
{{- range $r := until (int ($s.replicas | default 0)) -}}
{{- if gt $members 0 -}}
{{- $pairs = append $pairs (printf "%d=%s://%s:6333" $i (include "svc.scheme" $) (include "svc.memberReplicaHost" (list $ $s.name (mod $r $members) (div $r $members)))) -}}
{{- else -}}
{{- $pairs = append $pairs (printf "%d=%s://%s:6333" $i (include "svc.scheme" $) (include "svc.replicaHost" (list $ $s.name $r))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{ join "," $pairs }}
{{- end -}}

{{- define "svc.standbyUrls" -}}
{{- $ := . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.standby.count) -}}
{{- $urls = append $urls (printf "%s://%s:6333" (include "svc.scheme" $) (include "svc.podHost" (list $ "standby" $i))) -}}
{{- end -}}
[{{ join "," $urls }}]
{{- end -}}

{{/* Environment every svc container shares: the master key, TLS or the explicit plain-text mode, logs. */}}
{{- define "svc.commonEnv" -}}
- name: SVC_ENCRYPTION_KEY
  valueFrom:
    secretKeyRef: { name: {{ include "svc.secretName" . }}, key: encryption-key }
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
{{- if .Values.tls.enabled }}
- name: SVC_TLS_CERT
  value: /tls/tls.crt
- name: SVC_TLS_KEY
  value: /tls/tls.key
- name: NODE_EXTRA_CA_CERTS
  value: /tls/ca.crt
{{- else }}
# Plain text between pods, on purpose (values.yaml, tls): keys and the master key are still required.
- name: SVC_INSECURE
  value: "true"
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod's security: a numeric non-root user (the image's), no privilege, a read-only root. */}}
{{- define "svc.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile: { type: RuntimeDefault }
{{- end -}}

{{- define "svc.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: { drop: [ALL] }
{{- end -}}

{{- define "svc.ports" -}}
- { name: rest, containerPort: 6333, protocol: TCP }
- { name: grpc, containerPort: 6334, protocol: TCP }
{{- end -}}

{{/* /healthz for liveness (and a startup allowance: opening a large data directory takes a while), /readyz for readiness. */}}
{{- define "svc.probes" -}}
startupProbe:
  httpGet: { path: /healthz, port: rest, scheme: {{ include "svc.scheme" . | upper }} }
  periodSeconds: 5
  failureThreshold: 120
livenessProbe:
  httpGet: { path: /healthz, port: rest, scheme: {{ include "svc.scheme" . | upper }} }
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: { path: /readyz, port: rest, scheme: {{ include "svc.scheme" . | upper }} }
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* Volumes every pod has: /tmp (the root is read-only) and, with TLS, the certificate. */}}
{{- define "svc.commonVolumes" -}}
- name: tmp
  emptyDir: { sizeLimit: 256Mi }
{{- if .Values.tls.enabled }}
- name: tls
  secret: { secretName: {{ required "tls.secretName is required with tls.enabled" .Values.tls.secretName }}, defaultMode: 0440 }
{{- end }}
{{- end -}}

{{- define "svc.commonMounts" -}}
- { name: tmp, mountPath: /tmp }
{{- if .Values.tls.enabled }}
- { name: tls, mountPath: /tls, readOnly: true }
{{- end }}
{{- end -}}

{{- define "svc.placement" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
