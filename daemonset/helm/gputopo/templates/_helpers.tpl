{{/*
Names and labels every template shares. Object names are <namePrefix>-<part>; the labels are the
manifests' (daemonset/), so the default render equals them object for object.
*/}}

{{- define "gputopo.name" -}}
{{ .root.Values.namePrefix }}-{{ .part }}
{{- end }}

{{- define "gputopo.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The labels of an object of one component ("" for none). */}}
{{- define "gputopo.labels" -}}
app.kubernetes.io/name: gputopo
{{- with . }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/part-of: gputopo
{{- end }}

{{- define "gputopo.selector" -}}
app.kubernetes.io/name: gputopo
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gputopo.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The namespaced user name of a component's ServiceAccount, as admission policies see it. */}}
{{- define "gputopo.serviceAccountUser" -}}
system:serviceaccount:{{ index .root.Values.namespaces .namespace }}:{{ include "gputopo.name" . }}
{{- end }}

{{/*
An optional manifest of daemonset/optional/, included from its copy under files/optional/ (the
same bytes: tests/unit/daemonset/test_helm_chart.py), with the names and namespaces of this
release: a name "gputopo-..." takes namePrefix, namespace gputopo-agent and gputopo-system the
chart's, the two ServiceAccounts' user names in CEL expressions and a binding's ServiceAccount
subjects and roleRef follow, and the image the manifests name becomes the chart's.
*/}}
{{- define "gputopo.optionalFile" -}}
{{- $root := .root }}
{{- $text := $root.Files.Get (printf "files/optional/%s" .path) }}
{{- if not $text }}
{{- fail (printf "%s: files/optional/%s is not in the chart (scripts/helm/sync.sh copies it from daemonset/optional/)" .toggle .path) }}
{{- end }}
{{- $ns := $root.Values.namespaces }}
{{- $agentUser := include "gputopo.serviceAccountUser" (dict "root" $root "namespace" "agent" "part" "agent") }}
{{- $schedulerUser := include "gputopo.serviceAccountUser" (dict "root" $root "namespace" "scheduler" "part" "scheduler") }}
{{- $text = replace "ghcr.io/gputopo/gputopo:0.1.0" (include "gputopo.image" $root) $text }}
{{- $text = replace "system:serviceaccount:gputopo-agent:gputopo-agent" $agentUser $text }}
{{- $text = replace "system:serviceaccount:gputopo-system:gputopo-scheduler" $schedulerUser $text }}
{{- $namespaces := dict "gputopo-agent" $ns.agent "gputopo-system" $ns.scheduler }}
{{- range $doc := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj }}
{{- $meta := $obj.metadata }}
{{- if hasPrefix "gputopo" $meta.name }}
{{- $_ := set $meta "name" (printf "%s%s" $root.Values.namePrefix (trimPrefix "gputopo" $meta.name)) }}
{{- end }}
{{- if $meta.namespace }}
{{- $_ := set $meta "namespace" (get $namespaces $meta.namespace | default $meta.namespace) }}
{{- end }}
{{- if and (eq $obj.kind "ValidatingAdmissionPolicyBinding") (hasPrefix "gputopo" $obj.spec.policyName) }}
{{- $_ := set $obj.spec "policyName" (printf "%s%s" $root.Values.namePrefix (trimPrefix "gputopo" $obj.spec.policyName)) }}
{{- end }}
{{- if and (hasSuffix "RoleBinding" $obj.kind) (hasPrefix "gputopo" $obj.roleRef.name) }}
{{- $_ := set $obj.roleRef "name" (printf "%s%s" $root.Values.namePrefix (trimPrefix "gputopo" $obj.roleRef.name)) }}
{{- end }}
{{- range $subject := $obj.subjects | default list }}
{{- if and (eq $subject.kind "ServiceAccount") (hasPrefix "gputopo" $subject.name) }}
{{- $_ := set $subject "name" (printf "%s%s" $root.Values.namePrefix (trimPrefix "gputopo" $subject.name)) }}
{{- $_ := set $subject "namespace" (get $namespaces $subject.namespace | default $subject.namespace) }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The GPUs `gputopo-agent mps` serves (--gpus): mps.gpus, or with `auto` the GPUs the agent's
sharing.mps shares, through the device plugin and the DRA driver alike (sharing applies to the
GPUs of both, so --dra-gpus moves a shared GPU from one to the other and the list stays):
`all` when a resource shares every device (or none is configured), else the devices lists
together (values.schema.json takes no count of devices).
*/}}
{{- define "gputopo.mpsGpus" -}}
{{- $gpus := toString .Values.mps.gpus }}
{{- if ne $gpus "auto" }}
{{- $gpus }}
{{- else }}
{{- $sharing := (.Values.agent.config.sharing | default dict).mps | default dict }}
{{- $all := false }}
{{- $listed := list }}
{{- range $sharing.resources | default list }}
{{- $devices := .devices | default "all" }}
{{- if kindIs "slice" $devices }}
{{- range $devices }}{{ $listed = append $listed (toString .) }}{{ end }}
{{- else }}
{{- $all = true }}
{{- end }}
{{- end }}
{{- if or $all (not $listed) }}all{{ else }}{{ join "," (uniq $listed) }}{{ end }}
{{- end }}
{{- end }}
