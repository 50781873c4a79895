{{/* Helpers of the in-cluster dashboard (ui.yaml); this chart's alone, so _helpers.tpl stays the one the three charts share. */}}
{{/* Labels of the in-cluster dashboard's objects (ui values). */}}
{{- define "image-automation-controller.uiLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "image-automation-controller.uiSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: ui
app.kubernetes.io/part-of: image-toolkit
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the dashboard's pods: another name than the controller's, so neither Service selects the other's pods. */}}
{{- define "image-automation-controller.uiSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-ui" (include "image-automation-controller.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The dashboard's image, tk-image: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "image-automation-controller.uiImage" -}}
{{- if .Values.ui.image.digest }}
{{- printf "%s@%s" .Values.ui.image.repository .Values.ui.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.ui.image.repository (default .Chart.AppVersion .Values.ui.image.tag) }}
{{- end }}
{{- end }}
