{{/*
A StatefulSet of data nodes (a shard's leader, its read replicas, a consensus group's members, or the
standby nodes), each pod with its own PersistentVolumeClaim at /var/lib/svc, under the group's headless
Service.
Call with (dict "root" $ "name" <statefulset> "service" <headless service> "group" <group name>
"role" leader|replica|member|standby "replicas" <n> "env" <extra env as YAML, or "">, and for a member
"initEnv": SVC_RAFT_MEMBERS and SVC_RAFT_NODE_ID as YAML; for a read replica of a consensus group,
"follows" <member ordinal>, a label of its own so that each such StatefulSet selects only its pods).
A member (role member) also listens for its group on the consensus port, and waits before it starts
until its own name in SVC_RAFT_MEMBERS resolves (see svc.waitForName).
*/}}
{{- define "svc.nodeStatefulSet" -}}
{{- $ := .root -}}
{{- /* Each pod's controller-revision-hash label is <statefulset>-<10-character hash>, at most 63. */}}
{{- if gt (len .name) 52 }}
{{- fail (printf "the StatefulSet name %q is %d characters, more than 52 (its pods' controller-revision-hash label would pass 63 and no pod would start): shorten the release name, nameOverride or the shard name" .name (len .name)) }}
{{- end }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .name }}
  labels:
    {{- include "svc.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
    svc-group: {{ .group }}
    {{- if hasKey . "follows" }}
    svc-follows: {{ .follows | quote }}
    {{- end }}
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
      {{- if hasKey . "follows" }}
      svc-follows: {{ .follows | quote }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- include "svc.labels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .role }}
        svc-group: {{ .group }}
        {{- if hasKey . "follows" }}
        svc-follows: {{ .follows | quote }}
        {{- end }}
    spec:
      automountServiceAccountToken: false
      securityContext:
        {{- include "svc.podSecurityContext" $ | nindent 8 }}
      # A graceful close flushes the write-ahead log's last group commit and checkpoints.
      terminationGracePeriodSeconds: 60
      {{- with include "svc.placement" $ | trim }}{{ . | nindent 6 }}{{ end }}
      {{- if eq .role "member" }}
      initContainers:
        {{- include "svc.waitForName" (dict "root" $ "env" .initEnv) | nindent 8 }}
      {{- end }}
      containers:
        - name: svc
          image: {{ include "svc.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          args: [serve]
          ports:
            {{- include "svc.ports" $ | nindent 12 }}
            {{- if eq .role "member" }}
            - { name: raft, containerPort: {{ $.Values.consensus.port }}, protocol: TCP }
            {{- end }}
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
replica must reach a leader that is still starting, a member its peers, and the coordinator counts what
it can). With "raft" true it also names the consensus port. */}}
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
    {{- if .raft }}
    - { name: raft, port: {{ $.Values.consensus.port }}, targetPort: raft, protocol: TCP }
    {{- end }}
{{- end -}}

{{/* The Service the routers name a consensus group by: every ready member, each of which takes reads and
writes (a follower forwards a write to its leader), so a member down or drained costs the routers nothing. */}}
{{- define "svc.groupService" -}}
{{- $ := .root -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .service }}
  labels:
    {{- include "svc.labels" $ | nindent 4 }}
    app.kubernetes.io/component: member
    svc-group: {{ .group }}
spec:
  type: ClusterIP
  selector:
    {{- include "svc.selector" $ | nindent 4 }}
    app.kubernetes.io/component: member
    svc-group: {{ .group }}
  ports:
    - { name: rest, port: 6333, targetPort: rest, protocol: TCP }
    - { name: grpc, port: 6334, targetPort: grpc, protocol: TCP, appProtocol: grpc }
{{- end -}}

{{/*
An init container that waits until this member's own address in SVC_RAFT_MEMBERS resolves: a member
listens on that name, and the headless Service's record for a new pod appears a moment after the pod
has its address. Without the wait the first start fails and the pod restarts with a back-off.
*/}}
{{- define "svc.waitForName" -}}
{{- $ := .root -}}
- name: wait-for-name
  image: {{ include "svc.image" $ }}
  imagePullPolicy: {{ $.Values.image.pullPolicy }}
  command: [node, -e]
  args:
    - |
      const id = process.env.SVC_RAFT_NODE_ID;
      const entry = process.env.SVC_RAFT_MEMBERS.split(',').find((e) => e.startsWith(id + '='));
      const host = entry.slice(id.length + 1).replace(/:[0-9]+$/, '');
      const until = Date.now() + 300000;
      const attempt = () => require('node:dns').lookup(host, (err) => {
        if (!err) process.exit(0);
        if (Date.now() > until) { console.error(host + ' does not resolve: ' + err.code); process.exit(1); }
        setTimeout(attempt, 1000);
      });
      attempt();
  env:
    {{- .env | nindent 4 }}
  resources:
    requests: { cpu: 10m, memory: 32Mi }
    limits: { memory: 64Mi }
  securityContext:
    {{- include "svc.containerSecurityContext" $ | nindent 4 }}
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
