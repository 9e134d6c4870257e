{{/* The release's base name, at most 63 characters. */}}
{{- define "gpu-dra-driver.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "gpu-dra-driver.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels that select the kubelet plugin's pods. */}}
{{- define "gpu-dra-driver.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "gpu-dra-driver.serviceAccountName" -}}
{{- default (include "gpu-dra-driver.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The DRA driver name: fixed by the compatibility contract with NVIDIA's driver. */}}
{{- define "gpu-dra-driver.driverName" -}}
gpu.nvidia.com
{{- end -}}

{{- define "gpu-dra-driver.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Whether the ClusterRole grants patch on resourceclaims/status: "true" or "" (rbac.claimStatus;
auto: where the API server authorizes claim status per driver and node, 1.36+). */}}
{{- define "gpu-dra-driver.claimStatus" -}}
{{- $v := .Values.rbac.claimStatus -}}
{{- if eq (toString $v) "auto" -}}
{{- if semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- else if $v -}}true{{- end -}}
{{- end -}}

{{/* Refuses values combinations the schema cannot express and serve would refuse. */}}
{{- define "gpu-dra-driver.validate" -}}
{{- if and (not .Values.dynamicMIG) (or .Values.dynamicMIGPublishing.partitionsFirst .Values.dynamicMIGPublishing.oneMediaExtensionPlacement) -}}
{{- fail "dynamicMIGPublishing needs dynamicMIG: true: it changes how MIG partitions are published (serve refuses --mig-partitions-first and --mig-one-me-placement without --dynamic-mig)" -}}
{{- end -}}
{{- if and .Values.dynamicMIG .Values.staticMIGPublishing.byProfile -}}
{{- fail "staticMIGPublishing.byProfile orders existing (static) MIG devices; it cannot be combined with dynamicMIG: true, whose partitions are always grouped by profile (serve refuses --mig-by-profile with --dynamic-mig)" -}}
{{- end -}}
{{- if not .Values.fakeMachine.name -}}
{{- if .Values.fakeMachine.migConfig -}}
{{- fail "fakeMachine.migConfig needs fakeMachine.name: a mig-parted config is applied to a fake machine only (serve refuses --mig-config without --nvml=fake); partition real GPUs with mig-parted or the GPU operator" -}}
{{- end -}}
{{- if .Values.fakeMachine.driverRoot -}}
{{- fail "fakeMachine.driverRoot needs fakeMachine.name: it is the fake machine's driver installation; set nvidiaDriverRoot for real GPUs" -}}
{{- end -}}
{{- if .Values.fakeMachine.mountTmpfs -}}
{{- fail "fakeMachine.mountTmpfs needs fakeMachine.name: real GPUs always get their MPS tmpfs mounts (serve refuses --fake-mps-tmpfs without --nvml=fake)" -}}
{{- end -}}
{{- if .Values.computeDomains.fakeClique -}}
{{- fail "computeDomains.fakeClique needs fakeMachine.name: it is the fake GB200 tray's clique (compute-domain-driver plugin refuses --fake-clique without --nvml=fake); real GPUs report their own" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when MPS daemons run in pods of their own: MPS allowed and mpsDaemonPods on. */}}
{{- define "gpu-dra-driver.mpsDaemonPods" -}}
{{- if and .Values.mpsDaemonPods (has "MPS" .Values.sharingStrategies) }}true{{ end }}
{{- end }}
