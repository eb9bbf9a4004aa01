{{/*
nats.conf, as the kustomize base's (deploy/k8s/base/nats.conf) with more
than one server, and without its cluster block with one (the dev overlay's).
*/}}
{{- define "the-loop.natsConf" -}}
# JetStream with {{ .Values.nats.replicas }} server(s). sync_interval: always keeps an acked write
# on disk even when a whole zone loses power at once.
server_name: $POD_NAME
listen: 0.0.0.0:4222
http_port: 8222
pid_file: /var/run/nats/nats.pid
lame_duck_duration: 30s
lame_duck_grace_period: 10s
max_payload: 1MB

jetstream {
  store_dir: /data
  sync_interval: always
  max_memory_store: {{ .Values.nats.jetstream.maxMemoryStore }}
  max_file_store: {{ .Values.nats.jetstream.maxFileStore }}
}

# Authorization: one NKey user per bus identity, each with the subject
# permissions of its role (docs/architecture.md, trust boundaries), from
# `the-loop auth init`: the key auth.conf of the Secret
# {{ .Values.secrets.natsAuth.secretName }}. It holds public keys only; a
# client without a credential is refused.
include ./auth/auth.conf
{{- if gt (int .Values.nats.replicas) 1 }}

# The routes between the nodes, and the credential a node must present to
# open one: the key routes.conf of the Secret {{ .Values.secrets.natsAuth.secretName }}
# (scripts/nats-routes.sh, docs/deploy.md).
cluster {
  name: the-loop
  listen: 0.0.0.0:6222
  include ./auth/routes.conf
}
{{- end }}
{{ end }}
