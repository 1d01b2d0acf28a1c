{{- define "stomp-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stomp-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stomp-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stomp-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stomp-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "stomp-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "stomp-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stomp-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stomp-bridge.secretName" -}}
{{- default (include "stomp-bridge.fullname" .) .Values.secret.existingSecret }}
{{- end }}

{{- define "stomp-bridge.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "stomp-bridge.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/*
The bridge's settings file: the user's `config` map, then what the chart owns (listener
ports, TLS files, WebSocket) on top, so the Service, probes and mounts always match it.
*/}}
{{- define "stomp-bridge.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $_ := set $cfg "port" .Values.ports.stomp }}
{{- $_ := set $cfg "http_port" .Values.ports.http }}
{{- if .Values.tls.enabled }}
{{- $_ := set $cfg "tls_port" .Values.ports.stompTls }}
{{- $_ := set $cfg "tls_cert_file" "/etc/stomp-bridge/tls/tls.crt" }}
{{- $_ := set $cfg "tls_key_file" "/etc/stomp-bridge/tls/tls.key" }}
{{- if or .Values.tls.verifyPeer .Values.tls.certManager.enabled }}
{{- $_ := set $cfg "tls_ca_file" "/etc/stomp-bridge/tls/ca.crt" }}
{{- end }}
{{- $_ := set $cfg "tls_min_version" .Values.tls.minVersion }}
{{- $_ := set $cfg "tls_verify_peer" .Values.tls.verifyPeer }}
{{- $_ := set $cfg "tls_fail_if_no_peer_cert" .Values.tls.failIfNoPeerCert }}
{{- $_ := set $cfg "ssl_cert_login" .Values.tls.sslCertLogin }}
{{- if .Values.tls.amqpSignerSecret }}
{{- $_ := set $cfg "tls_amqp_signer_cert_file" "/etc/stomp-bridge/signer/tls.crt" }}
{{- $_ := set $cfg "tls_amqp_signer_key_file" "/etc/stomp-bridge/signer/tls.key" }}
{{- end }}
{{- end }}
{{- if not .Values.websocket.enabled }}
{{- /* the bridge listens for WebSocket by default: off unless the Service routes to it */}}
{{- $_ := set $cfg "ws_port" nil }}
{{- else }}
{{- $_ := set $cfg "ws_port" .Values.ports.websocket }}
{{- $_ := set $cfg "ws_path" .Values.websocket.path }}
{{- if .Values.websocket.allowedOrigins }}
{{- $_ := set $cfg "ws_allowed_origins" (join "," .Values.websocket.allowedOrigins) }}
{{- end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{- define "stomp-bridge.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- $grace := (.Values.config | default dict).shutdown_grace | default 10 }}
{{- add .Values.preStopSleepSeconds (ceil $grace | int) 10 }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}
