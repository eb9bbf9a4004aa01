{{/*
The five services in order, and what each is, whatever the values say: its
public port (the ingresses') and the tokens it is given from
secrets.tokens, by key (docs/deploy.md's table: each service only the keys it
uses, the dispatcher none of the-loop's).
*/}}
{{- define "the-loop.serviceNames" -}}
["ingress-github", "ingress-slack", "ledger-writer", "slack-renderer", "dispatcher"]
{{- end }}

{{- define "the-loop.serviceShapes" -}}
ingress-github:
  port: {name: webhook, port: 8787}
  tokens:
    - {env: LOOP_GITHUB_TOKEN, key: github-token}
    - {env: LOOP_GITHUB_WEBHOOK_SECRET, key: github-webhook-secret}
    - {env: LOOP_ENVELOPE_KEY, key: envelope-key}
ingress-slack:
  port: {name: slack, port: 8788}
  tokens:
    - {env: LOOP_SLACK_BOT_TOKEN, key: slack-bot-token}
    - {env: LOOP_SLACK_APP_TOKEN, key: slack-app-token}
    - {env: LOOP_SLACK_SIGNING_SECRET, key: slack-signing-secret}
ledger-writer:
  tokens:
    - {env: LOOP_GITHUB_TOKEN, key: github-token}
    - {env: LOOP_ENVELOPE_KEY, key: envelope-key}
slack-renderer:
  tokens:
    - {env: LOOP_SLACK_BOT_TOKEN, key: slack-bot-token}
dispatcher:
  tokens: []
{{- end }}

{{/* A variable from secrets.tokens. Args: ctx, env, key. */}}
{{- define "the-loop.tokenEnv" -}}
- name: {{ .env }}
  valueFrom: {secretKeyRef: {name: {{ .ctx.Values.secrets.tokens.secretName | quote }}, key: {{ .key }}, optional: true}}
{{- end }}
