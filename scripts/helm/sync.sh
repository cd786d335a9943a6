#!/usr/bin/env bash
# Copies what the chart takes unchanged from daemonset/ into it: the CRDs (daemonset/helm/gputopo/
# crds/, which Helm installs before the templates) and the optional manifests the chart includes
# with their names (files/optional/). tests/unit/daemonset/test_helm_chart.py fails while a copy
# differs from its source; run this after changing one of them.
set -euo pipefail
cd "$(dirname "$0")/../../daemonset"
chart=helm/gputopo
rm -rf "$chart/crds" "$chart/files/optional"
mkdir -p "$chart/crds" "$chart/files/optional"
cp crds/*.yaml "$chart/crds/"
rm "$chart/crds/kustomization.yaml"  # not a CRD: Helm would send it to the API server
for file in admission/agent-own-node-policy.yaml admission/share-trust-policy.yaml \
  queue-label/queue-label-policy.yaml monitoring/podmonitors.yaml \
  monitoring/prometheusrule.yaml monitoring/gputopo-dashboard.json dra/dra.yaml \
  dra/slice-policy.yaml dra/extended-resource/deviceclass.yaml; do
  mkdir -p "$chart/files/optional/$(dirname "$file")"
  cp "optional/$file" "$chart/files/optional/$file"
done
