{{/*
Helpers of the Sluice chart. The chart keeps to what test/support/helm-render renders (values,
release, chart, sprig, include/required/toYaml/fail): no .Files, .Capabilities or lookup.
*/}}

{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A number of seconds from the config, or fail: the grace is computed from it. */}}
{{- define "sluice.number" -}}
{{- $v := index . 1 -}}
{{- if not (or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v)) -}}
{{- fail (printf "config.%s must be a number in the chart's config (the grace period is computed from it), got %v" (index . 0) $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/* The config as mounted: values.config, and with etcd a snapshot path on a writable volume (the config's directory is read-only). */}}
{{- define "sluice.config" -}}
{{- $c := deepCopy (.Values.config | default dict) -}}
{{- if and (hasKey $c "etcd") (not (dig "snapshot" "path" "" $c)) -}}
{{- $_ := set $c "snapshot" (merge (dict "path" "/var/lib/sluice/snapshot.json") (get $c "snapshot" | default dict)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* window: shutdown.min_drain_secs (L2), default 30 as in the schema. */}}
{{- define "sluice.window" -}}
{{- include "sluice.number" (list "shutdown.min_drain_secs" (dig "shutdown" "min_drain_secs" 30 (.Values.config | default dict))) -}}
{{- end -}}

{{- define "sluice.maxDrain" -}}
{{- include "sluice.number" (list "shutdown.max_drain_secs" (dig "shutdown" "max_drain_secs" 0 (.Values.config | default dict))) -}}
{{- end -}}

{{/*
L9, as src/deploy/plan.ts exitAllowance: in one process the snapshot write (etcd), the usage commit
(Redis), the usage ledger's flush (a `ledger` section not disabled), the tracing flush and the
status page's last event (with an admin listener and admin.status_page) run in parallel, each
bounded (5 s; 5 s; tracing.flush_timeout_ms, default 2000; 1 s).
With workers (anything but workers: 1), each worker's exit (Redis, ledger, tracing) ends before the
supervisor's (snapshot, status page): two steps.
*/}}
{{- define "sluice.exitAllowance" -}}
{{- $c := .Values.config | default dict -}}
{{- $flush := 5.0 -}}
{{- $etcd := hasKey $c "etcd" -}}
{{- $redis := eq (toString (dig "limits" "store" "memory" $c)) "redis" -}}
{{- $group := ne (toString (dig "workers" "auto" $c)) "1" -}}
{{- $ledger := and (hasKey $c "ledger") (ne (toString (dig "ledger" "enabled" true $c)) "false") -}}
{{- $status := 0.0 -}}
{{- if and (ne (toString (dig "admin" "status_page" true $c)) "false") (hasKey (include "sluice.listener" (list $c "admin") | fromJson) "address") -}}
{{- $status = 1.0 -}}
{{- end -}}
{{- $tracing := 0.0 -}}
{{- $t := dig "tracing" dict $c -}}
{{- if eq (toString (dig "enabled" false $t)) "true" -}}
{{- $tracing = divf (include "sluice.number" (list "tracing.flush_timeout_ms" (dig "flush_timeout_ms" 2000 $t)) | float64) 1000 -}}
{{- end -}}
{{- if $group -}}
{{- $w := 0.0 -}}{{- if or $redis $ledger -}}{{- $w = $flush -}}{{- end -}}
{{- $s := 0.0 -}}{{- if $etcd -}}{{- $s = $flush -}}{{- end -}}
{{- addf (maxf $w $tracing) (maxf $s $status) -}}
{{- else -}}
{{- $o := 0.0 -}}{{- if or $etcd $redis $ledger -}}{{- $o = $flush -}}{{- end -}}
{{- maxf $o $tracing $status -}}
{{- end -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds (D1), as `sluice plan`: preStop + drain + exit allowance + margin,
where drain = window + longest work, or max_drain_secs + 1 s (the forced end, L8) when that is shorter.
*/}}
{{- define "sluice.grace" -}}
{{- $window := include "sluice.window" . | float64 -}}
{{- $max := include "sluice.maxDrain" . | float64 -}}
{{- $drain := addf $window .Values.sizing.longestSeconds -}}
{{- if and (gt $max 0.0) (lt (addf $max 1) $drain) -}}
{{- $drain = addf $max 1 -}}
{{- end -}}
{{- $total := addf .Values.sizing.preStopSeconds $drain (include "sluice.exitAllowance" . | float64) .Values.sizing.marginSeconds -}}
{{- ceil $total | int -}}
{{- end -}}

{{/* A listener's port (host:port, [v6]:port or :port), and whether it binds loopback only. */}}
{{- define "sluice.listener" -}}
{{- $role := index . 1 -}}
{{- $found := dict -}}
{{- range (dig "listeners" list (index . 0)) -}}
{{- if and (eq .role $role) (not (hasKey $found "address")) -}}
{{- $_ := set $found "address" .address -}}
{{- $_ := set $found "tls" (hasKey . "tls") -}}
{{- end -}}
{{- end -}}
{{- if hasKey $found "address" -}}
{{- $address := toString $found.address -}}
{{- $host := regexReplaceAll ":[0-9]+$" $address "" | trimPrefix "[" | trimSuffix "]" -}}
{{- $_ := set $found "port" (regexFind "[0-9]+$" $address | int) -}}
{{- $_ := set $found "loopback" (or (eq $host "localhost") (eq $host "::1") (hasPrefix "127." $host)) -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}

{{- define "sluice.proxy" -}}
{{- $p := include "sluice.listener" (list (.Values.config | default dict) "proxy") | fromJson -}}
{{- if not (hasKey $p "address") -}}{{- fail "config.listeners needs a listener with role proxy" -}}{{- end -}}
{{- if $p.loopback -}}{{- fail (printf "the proxy listener binds %s: in a pod the probes and the Service reach it on the pod's IP; bind 0.0.0.0 (or [::])" $p.address) -}}{{- end -}}
{{- toJson $p -}}
{{- end -}}

{{/* The admin listener when it can be reached from outside the pod (for the ServiceMonitor), else {}. */}}
{{- define "sluice.exposedAdmin" -}}
{{- $c := .Values.config | default dict -}}
{{- $a := include "sluice.listener" (list $c "admin") | fromJson -}}
{{- if and (hasKey $a "address") (not $a.loopback) -}}
{{- if not (or (dig "admin" "token" "" $c) (dig "admin" "tokens" list $c)) -}}
{{- fail "the admin listener binds a non-loopback address: give it admin.token or admin.tokens (the admin API can drain the gateway)" -}}
{{- end -}}
{{- toJson $a -}}
{{- else -}}
{{- toJson dict -}}
{{- end -}}
{{- end -}}
