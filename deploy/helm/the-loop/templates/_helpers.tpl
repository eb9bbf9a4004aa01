{{/*
Objects keep the kustomize base's names (nats, ingress-github, …): one
release per namespace, as with the base.
*/}}

{{- define "the-loop.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "the-loop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
metadata: name, namespace and labels. Args: ctx (the root), name, labels (a
dict: the object's own, which the base has too).
*/}}
{{- define "the-loop.metadata" -}}
{{- $ctx := .ctx }}
{{- $labels := dict "app.kubernetes.io/part-of" "the-loop" "app.kubernetes.io/managed-by" $ctx.Release.Service "app.kubernetes.io/instance" $ctx.Release.Name "helm.sh/chart" (include "the-loop.chart" $ctx) }}
{{- with $ctx.Chart.AppVersion }}
{{- $_ := set $labels "app.kubernetes.io/version" . }}
{{- end }}
{{- $labels = merge (deepCopy (.labels | default dict)) $labels (deepCopy $ctx.Values.global.labels) -}}
name: {{ .name }}
namespace: {{ include "the-loop.namespace" $ctx }}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- end }}

{{/*
image and imagePullPolicy, as the NATS chart builds them. Args: image (the
values' image block), global (.Values.global).
*/}}
{{- define "the-loop.image" -}}
{{- $image := "" }}
{{- if .image.digest }}
{{- $image = printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- $image = printf "%s:%s" .image.repository (toString .image.tag) }}
{{- end }}
{{- if or .image.registry .global.image.registry }}
{{- $image = printf "%s/%s" (.image.registry | default .global.image.registry) $image }}
{{- end }}
{{- if .image.fullImageName }}
{{- $image = .image.fullImageName }}
{{- end -}}
image: {{ $image | quote }}
{{- if or .image.pullPolicy .global.image.pullPolicy }}
imagePullPolicy: {{ .image.pullPolicy | default .global.image.pullPolicy }}
{{- end }}
{{- end }}

{{/* imagePullSecrets of a pod, from global.image.pullSecretNames. */}}
{{- define "the-loop.imagePullSecrets" -}}
{{- with .Values.global.image.pullSecretNames -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
LOOP_STREAM_REPLICAS: streamReplicas, else one per NATS server; never more
than there are servers.
*/}}
{{- define "the-loop.streamReplicas" -}}
{{- $r := .Values.streamReplicas | default .Values.nats.replicas }}
{{- if gt (int $r) (int .Values.nats.replicas) }}
{{- fail (printf "streamReplicas %v: a stream cannot have more replicas than the %v NATS server(s) of nats.replicas" $r .Values.nats.replicas) }}
{{- end }}
{{- $r | toString }}
{{- end }}

{{/* The operator config, the-loop.yaml. */}}
{{- define "the-loop.operatorConfig" -}}
{{- .Values.config.contents | default (.Files.Get "files/the-loop.yaml") }}
{{- end }}

{{/*
An env map of the values (name: value, or name: {valueFrom: …}) as a list,
in the order of its names.
*/}}
{{- define "the-loop.envMap" -}}
{{- range $name := keys . | sortAlpha }}
{{- $v := get $ $name }}
{{- if kindIs "map" $v }}
- {{ merge (dict "name" $name) $v | toJson }}
{{- else }}
- {{ dict "name" $name "value" (toString $v) | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod's security context: non-root, its uid's group, RuntimeDefault seccomp. */}}
{{- define "the-loop.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ . }}
  runAsGroup: {{ . }}
  fsGroup: {{ . }}
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* A container's security context: no escalation, read-only root, no capabilities. */}}
{{- define "the-loop.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* checksum annotations of the ConfigMaps a pod mounts. Args: ctx, names (list). */}}
{{- define "the-loop.checksums" -}}
{{- if .ctx.Values.podTemplate.configChecksumAnnotation -}}
annotations:
{{- range .names }}
{{- if eq . "the-loop-config" }}
  checksum/the-loop-config: {{ include "the-loop.operatorConfig" $.ctx | sha256sum }}
{{- else if eq . "nats-config" }}
  checksum/nats-config: {{ include "the-loop.natsConf" $.ctx | sha256sum }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
