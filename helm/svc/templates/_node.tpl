{{/*
A StatefulSet of data nodes (a shard's leader, its read replicas, or the standby nodes), each pod with its
own PersistentVolumeClaim at /var/lib/svc, under the group's headless Service.
Call with (dict "root" $ "name" <statefulset> "service" <headless service> "group" <group name>
"role" leader|replica|standby "replicas" <n> "env" <extra env as YAML, or "">).
*/}}
{{- define "svc.nodeStatefulSet" -}}
{{- $ := .root -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .name }}
  labels:
    {{- include "svc.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
    svc-group: {{ .group }}
spec:
  serviceName: {{ .service }}
  replicas: {{ .replicas }}
  # Members start together: a replica waits for its leader on its own (it retries the stream).
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      {{- include "svc.selector" $ | nindent 6 }}
      app.kubernetes.io/component: {{ .role }}
      svc-group: {{ .group }}
  template:
    metadata:
      labels:
        {{- include "svc.labels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .role }}
        svc-group: {{ .group }}
    spec:
      automountServiceAccountToken: false
      securityContext:
        {{- include "svc.podSecurityContext" $ | nindent 8 }}
      # A graceful close flushes the write-ahead log's last group commit and checkpoints.
      terminationGracePeriodSeconds: 60
      {{- with include "svc.placement" $ | trim }}{{ . | nindent 6 }}{{ end }}
      containers:
        - name: svc
          image: {{ include "svc.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          args: [serve]
          ports:
            {{- include "svc.ports" $ | nindent 12 }}
          env:
            # Nodes accept only the shard key: clients go through the routers.
            - name: SVC_API_KEYS
              valueFrom:
                secretKeyRef: { name: {{ include "svc.secretName" $ }}, key: shard-key }
            - name: SVC_DATA_DIR
              value: /var/lib/svc/data
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- include "svc.commonEnv" $ | nindent 12 }}
          {{- include "svc.probes" $ | nindent 10 }}
          resources:
            {{- toYaml $.Values.node.resources | nindent 12 }}
          securityContext:
            {{- include "svc.containerSecurityContext" $ | nindent 12 }}
          volumeMounts:
            - { name: data, mountPath: /var/lib/svc }
            {{- include "svc.commonMounts" $ | nindent 12 }}
      volumes:
        {{- include "svc.commonVolumes" $ | nindent 8 }}
  # Claims outlive the StatefulSet (scale-down and uninstall keep the data).
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: Retain
    whenScaled: Retain
  volumeClaimTemplates:
    - metadata:
        name: data
        labels:
          {{- include "svc.selector" $ | nindent 10 }}
          svc-group: {{ .group }}
      spec:
        accessModes: [ReadWriteOnce]
        {{- with $.Values.node.persistence.storageClass }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $.Values.node.persistence.size }}
{{- end -}}

{{/* A headless Service: stable DNS names for the group's pods, published before they are ready (a
replica must reach a leader that is still starting, and the coordinator counts what it can). */}}
{{- define "svc.headlessService" -}}
{{- $ := .root -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .service }}
  labels:
    {{- include "svc.labels" $ | nindent 4 }}
    svc-group: {{ .group }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {{- include "svc.selector" $ | nindent 4 }}
    svc-group: {{ .group }}
  ports:
    - { name: rest, port: 6333, targetPort: rest, protocol: TCP }
    - { name: grpc, port: 6334, targetPort: grpc, protocol: TCP, appProtocol: grpc }
{{- end -}}

{{- define "svc.pdb" -}}
{{- $ := .root -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "svc.labels" $ | nindent 4 }}
    svc-group: {{ .group }}
spec:
  maxUnavailable: {{ .maxUnavailable }}
  selector:
    matchLabels:
      {{- include "svc.selector" $ | nindent 6 }}
      app.kubernetes.io/component: {{ .role }}
      svc-group: {{ .group }}
{{- end -}}
