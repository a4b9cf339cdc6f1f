package daemonset

import (
	"fmt"
	"regexp"
)

// HelmTemplateHeader opens the Helm chart's DaemonSet template.
const HelmTemplateHeader = `# GENERATED from deploy/kubernetes/daemonset.yaml (internal/daemonset,
# HelmDaemonSet): do not edit. The privileges, mounts, probes and
# environment are the kustomize base's, word for word; only what an
# operator chooses comes from values.yaml. Edit the base, then run
#   go test ./deploy/ -run TestHelmChartIsMadeFromTheKustomizeBase -update
`

// A helmEdit turns one part of the base into template expressions. Its
// pattern must match the base exactly once.
type helmEdit struct {
	what    string
	pattern *regexp.Regexp
	repl    string
}

var helmEdits = []helmEdit{
	{"the DaemonSet's name", regexp.MustCompile(`(?m)^metadata:\n  name: mcptrace\n`), `metadata:
  name: {{ include "mcptrace.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "mcptrace.labels" . | nindent 4 }}
`},
	{"the selector", regexp.MustCompile(`(?m)^    matchLabels:\n      app\.kubernetes\.io/name: mcptrace\n`), `    matchLabels:
      {{- include "mcptrace.selectorLabels" . | nindent 6 }}
`},
	{"the pod's labels", regexp.MustCompile(`(?m)^      labels:\n        app\.kubernetes\.io/name: mcptrace\n`), `      labels:
        {{- include "mcptrace.labels" . | nindent 8 }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
`},
	{"the pod's annotations", regexp.MustCompile(`(?m)^      annotations:\n((?:        #.*\n)*)        prometheus\.io/scrape: "true"\n        prometheus\.io/port: "9467"\n`), `      annotations:
        # A changed configuration rolls the agents.
        checksum/config: {{ include "mcptrace.config" . | sha256sum }}
        {{- if .Values.metrics.annotations }}
$1        prometheus.io/scrape: "true"
        prometheus.io/port: {{ .Values.metrics.port | quote }}
        {{- end }}
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
`},
	{"the tolerations", regexp.MustCompile(`(?m)^      tolerations:\n        - operator: Exists\n`), `      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
`},
	{"the priority class", regexp.MustCompile(`(?m)^      priorityClassName: system-node-critical\n`), `      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
`},
	{"the image", regexp.MustCompile(`(?m)^          image: mcptrace:latest\n          imagePullPolicy: IfNotPresent\n`), `          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
          imagePullPolicy: {{ .Values.image.pullPolicy }}
`},
	{"the metrics address's port", regexp.MustCompile(`(?m)^(            - --metrics\.listen-address=\[\$\(HOST_IP\)\]):9467\n`), `$1:{{ .Values.metrics.port }}
`},
	{"the end of the arguments", regexp.MustCompile(`(?m)^(          args:\n(?:            - .*\n)+)`), `$1            {{- with .Values.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
`},
	{"the metrics port", regexp.MustCompile(`(?m)^              containerPort: 9467\n              hostPort: 9467\n`), `              containerPort: {{ .Values.metrics.port }}
              hostPort: {{ .Values.metrics.port }}
`},
	{"the resources", regexp.MustCompile(`(?m)^          resources:\n            requests:\n              cpu: 50m\n              memory: 64Mi\n`), `          resources:
            {{- toYaml .Values.resources | nindent 12 }}
`},
	{"the configuration's ConfigMap", regexp.MustCompile(`(?m)^          configMap:\n            name: mcptrace-config\n`), `          configMap:
            name: {{ include "mcptrace.fullname" . }}-config
`},
}

// HelmDaemonSet returns the Helm chart's DaemonSet template
// (deploy/helm/mcptrace/templates/daemonset.yaml) made from the kustomize
// base's daemonset.yaml: the same text, so the same privileges, mounts,
// probes and environment, with what an operator chooses (names and
// labels, the image, more arguments, the metrics port, resources,
// scheduling, the configuration's ConfigMap) turned into template
// expressions over the chart's values.yaml. Each part it turns must be in
// the base exactly once, as it is written now; otherwise it fails naming
// the part, and this file must learn the base's new shape.
func HelmDaemonSet(base []byte) ([]byte, error) {
	out := string(base)
	for _, e := range helmEdits {
		if n := len(e.pattern.FindAllStringIndex(out, -1)); n != 1 {
			return nil, fmt.Errorf("helm template: %s: found %d times in the base, want once (pattern %s)", e.what, n, e.pattern)
		}
		out = e.pattern.ReplaceAllString(out, e.repl)
	}
	return []byte(HelmTemplateHeader + out), nil
}
