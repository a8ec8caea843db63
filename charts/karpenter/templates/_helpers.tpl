{{/* Names and labels. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "karpenter.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "karpenter.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "karpenter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "karpenter.image" -}}
{{- $image := .Values.controller.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The plugins to install, as YAML: name -> {wasm (base64, or empty), key (its
file name: `<name>.wasm`, or `<name>.wasm.zst` when zstd-compressed), source
(where the host finds the WebAssembly when the ConfigMap does not carry it),
config (the `<name>.yaml` the host reads), nodeClasses}. Bundled plugins are
built into the controller binary, so by default their ConfigMap holds only
their configuration, `source: {builtin: <name>}`; `file` (inside the chart)
or `source` (a URL, OCI artifact or volume file) puts another build in their place. Extra
plugins come from wasmBase64, a file inside the chart, or a source.
*/}}
{{- define "karpenter.plugins" -}}
{{- $root := . -}}
{{- $env := dict -}}
{{- range .Values.controller.env -}}
{{- if hasKey . "value" -}}
{{- $_ := set $env .name (toString .value) -}}
{{- end -}}
{{- end -}}
{{- $out := dict -}}
{{- range $name, $p := .Values.plugins.bundled -}}
{{- if $p.enabled -}}
{{- if $p.file -}}
{{- $wasm := $root.Files.Get $p.file -}}
{{- if not $wasm -}}
{{- fail (printf "plugins.bundled.%s.file: %s is not in the chart" $name $p.file) -}}
{{- end -}}
{{- $key := ternary (printf "%s.wasm.zst" $name) (printf "%s.wasm" $name) (hasSuffix ".zst" $p.file) -}}
{{- $_ := set $out $name (dict "wasm" (b64enc $wasm) "key" $key "plugin" $p) -}}
{{- else -}}
{{- $_ := set $out $name (dict "source" (default (dict "builtin" $name) $p.source) "plugin" $p) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name, $p := .Values.plugins.extra -}}
{{- if hasKey $out $name -}}
{{- fail (printf "plugins.extra.%s: a bundled plugin has this name" $name) -}}
{{- end -}}
{{- $wasm := "" -}}
{{- if $p.wasmBase64 -}}
{{- $wasm = $p.wasmBase64 -}}
{{- else if $p.file -}}
{{- $wasm = $root.Files.Get $p.file | b64enc -}}
{{- end -}}
{{- if and (not $wasm) (not $p.source) -}}
{{- fail (printf "plugins.extra.%s: set wasmBase64, file (inside the chart) or source" $name) -}}
{{- end -}}
{{- $key := ternary (printf "%s.wasm.zst" $name) (printf "%s.wasm" $name) (or (default false $p.zstd) (hasSuffix ".zst" (default "" $p.file))) -}}
{{- if $wasm -}}
{{- $_ := set $out $name (dict "wasm" $wasm "key" $key "plugin" $p) -}}
{{- else -}}
{{- $_ := set $out $name (dict "source" $p.source "plugin" $p) -}}
{{- end -}}
{{- end -}}
{{- range $name, $entry := $out -}}
{{- $p := $entry.plugin -}}
{{- $settings := dict -}}
{{- range $p.settingsFromEnv -}}
{{- if hasKey $env . -}}
{{- $_ := set $settings . (get $env .) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $p.settings -}}
{{- $_ := set $settings $k (toString $v) -}}
{{- end -}}
{{- $config := dict -}}
{{- with $entry.source -}}
{{- $_ := set $config "source" . -}}
{{- end -}}
{{- range $key := list "allowedHosts" "h2cHosts" "secrets" "tokens" "memoryMib" "memoryBudgetMib" "maxInstances" "cpuMs" "callTimeoutSeconds" -}}
{{- if hasKey $p $key -}}
{{- $_ := set $config $key (get $p $key) -}}
{{- end -}}
{{- end -}}
{{- if $settings -}}
{{- $_ := set $config "settings" $settings -}}
{{- end -}}
{{- $fromSecrets := dict -}}
{{- range $k, $v := $p.secretSettings -}}
{{- if not (hasKey $settings $k) -}}
{{- $_ := set $fromSecrets $k $v -}}
{{- end -}}
{{- end -}}
{{- if $fromSecrets -}}
{{- $_ := set $config "secretSettings" $fromSecrets -}}
{{- end -}}
{{- $_ := set $entry "config" $config -}}
{{- $_ := set $entry "nodeClasses" (default list $p.nodeClasses) -}}
{{- $_ := unset $entry "plugin" -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Secrets mounted for plugins, as YAML: a list of {name, keys}. */}}
{{- define "karpenter.pluginSecrets" -}}
{{- $out := list -}}
{{- if .Values.controller.nebiusCredentials.enabled -}}
{{- $out = append $out (dict "name" "nebius-credentials" "keys" (list "credentials.json") "optional" (not .Values.controller.nebiusCredentials.credentialsJson)) -}}
{{- end -}}
{{- if .Values.controller.kubeletBootstrapToken.enabled -}}
{{- $out = append $out (dict "name" "kubelet-bootstrap-token" "keys" (list "token") "optional" true) -}}
{{- end -}}
{{- range .Values.controller.extraSecrets -}}
{{- $out = append $out (dict "name" .name "keys" .keys "optional" (default false .optional)) -}}
{{- end -}}
{{- /* A registry pull secret a plugin's `source` names, for the loader. */ -}}
{{- $named := dict -}}
{{- range $out -}}
{{- $_ := set $named .name true -}}
{{- end -}}
{{- range $name, $entry := include "karpenter.plugins" . | fromYaml -}}
{{- with $entry.source -}}
{{- if and .pullSecret (not (hasKey $named .pullSecret)) -}}
{{- $out = append $out (dict "name" .pullSecret "keys" (list ".dockerconfigjson") "optional" false) -}}
{{- $_ := set $named .pullSecret true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "karpenter.leaseName" -}}
karpenter-leader-election
{{- end -}}

{{/* settings.featureGates as FEATURE_GATES: nodeRepair: true -> NodeRepair=true. */}}
{{- define "karpenter.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := .Values.settings.featureGates }}
{{- $gates = append $gates (printf "%s%s=%t" (substr 0 1 $name | upper) (substr 1 (len $name) $name) $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
