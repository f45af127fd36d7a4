{{- define "memvirt.labels" -}}
app.kubernetes.io/name: memvirt
app.kubernetes.io/component: memvirtd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "memvirt.selector" -}}
app.kubernetes.io/name: memvirt
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
