#!/usr/bin/env bash
# Regenerate deviceplugin/_pb/ from the .proto files here, with grpcio-tools from .venv.
# The include mapping puts each file at deviceplugin/_pb/<name>.proto in protobuf's descriptor pool:
# unique names, and the generated imports read `from deviceplugin._pb import ...`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=deviceplugin/_pb
rm -f "$OUT"/*_pb2.py "$OUT"/*_pb2.pyi "$OUT"/*_pb2_grpc.py
mkdir -p "$OUT"
"$PY" -m grpc_tools.protoc \
  -I"$OUT"=proto \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  "$OUT"/deviceplugin.proto "$OUT"/podresources.proto "$OUT"/pluginregistration.proto \
  "$OUT"/dra_v1.proto "$OUT"/dra_v1beta1.proto "$OUT"/dra_health_v1alpha1.proto
[ -f "$OUT/__init__.py" ] || printf '"""Generated protobuf and gRPC code (proto/generate.sh); do not edit."""\n' >"$OUT/__init__.py"
