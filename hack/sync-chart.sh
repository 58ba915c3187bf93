#!/usr/bin/env bash
# Copies what dist/chart shares with config/ into the chart (make manifests runs it): the CRDs,
# wrapped in the chart's crd.enable and crd.keep values, and the Prometheus rules the
# PrometheusRule template reads with .Files.Get.
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist/chart/templates/crd
rm -f "$out"/*.yaml
for f in config/crd/bases/*.yaml; do
  {
    echo '{{- if .Values.crd.enable }}'
    # Helm keeps a CRD with this annotation on uninstall, and with it every RateLimitPolicy.
    # The chart's labels join the CRD's own (a policy attachment CRD carries one), or start them.
    if grep -q '^  labels:$' "$f"; then
      labels=(-e '/^  labels:$/a\    {{- include "sluice.labels" . | nindent 4 }}')
    else
      labels=(-e '/^metadata:$/a\  labels:\n    {{- include "sluice.labels" . | nindent 4 }}')
    fi
    sed -e '/^  annotations:$/a\    {{- if .Values.crd.keep }}\n    helm.sh/resource-policy: keep\n    {{- end }}' "${labels[@]}" "$f"
    echo '{{- end }}'
  } > "$out/$(basename "$f")"
done
cp config/prometheus/sluice-rules.yaml dist/chart/files/sluice-rules.yaml
