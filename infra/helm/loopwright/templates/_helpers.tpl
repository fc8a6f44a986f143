{{- define "loopwright.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "loopwright.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "controlplane") */}}
{{- define "loopwright.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "loopwright.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" (include "loopwright.fullname" .)) -}}
{{- end -}}

{{- define "loopwright.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "loopwright.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "loopwright.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "loopwright.controlplaneImage" -}}
{{- printf "%s%s:%s" .Values.image.registry .Values.image.controlplane (include "loopwright.tag" .) -}}
{{- end -}}

{{- define "loopwright.workerImage" -}}
{{- printf "%s%s:%s-%s" .Values.image.registry .Values.image.worker (include "loopwright.tag" .) .Values.image.workerVariant -}}
{{- end -}}

{{/* settings every container gets: from the ConfigMap, the Secret and values.env */}}
{{- define "loopwright.env" -}}
- name: DJANGO_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ include "loopwright.secretName" . }}, key: DJANGO_SECRET_KEY}}
- name: LOOPWRIGHT_KMS_MASTER_KEY
  valueFrom: {secretKeyRef: {name: {{ include "loopwright.secretName" . }}, key: LOOPWRIGHT_KMS_MASTER_KEY}}
- name: DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ include "loopwright.secretName" . }}, key: DATABASE_URL}}
- name: LOOPWRIGHT_BROKER_URL
  valueFrom: {secretKeyRef: {name: {{ include "loopwright.secretName" . }}, key: LOOPWRIGHT_BROKER_URL}}
- name: LOOPWRIGHT_METRICS_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "loopwright.secretName" . }}, key: LOOPWRIGHT_METRICS_TOKEN, optional: true}}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "loopwright.envFrom" -}}
- configMapRef:
    name: {{ include "loopwright.fullname" . }}-settings
{{- end -}}

{{/* volumes every pod has: the shared checkpoint store and writable scratch */}}
{{- define "loopwright.volumes" -}}
- name: storage
  persistentVolumeClaim:
    claimName: {{ .Values.storage.existingClaim | default (printf "%s-storage" (include "loopwright.fullname" .)) }}
- name: data
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "loopwright.volumeMounts" -}}
- {name: data, mountPath: /var/lib/loopwright}
- {name: storage, mountPath: /var/lib/loopwright/storage}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* waits for this release's migrations: kubelet retries it until they are applied */}}
{{- define "loopwright.waitForMigrations" -}}
- name: wait-for-migrations
  image: {{ include "loopwright.controlplaneImage" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python", "manage.py", "migrate", "--check"]
  env:
    {{- include "loopwright.env" . | nindent 4 }}
  envFrom:
    {{- include "loopwright.envFrom" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "loopwright.volumeMounts" . | nindent 4 }}
{{- end -}}

{{- define "loopwright.podAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
checksum/settings: {{ include (print .root.Template.BasePath "/settings.yaml") .root | sha256sum }}
{{- end -}}
