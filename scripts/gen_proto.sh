#!/usr/bin/env bash
# Regenerate proxy/protocol/*_pb2*.py from our .proto files (needs grpcio-tools; the output is committed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
cd "$ROOT"
"$PYTHON" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. \
  proxy/protocol/definition.proto proxy/protocol/service.proto
rm -f proxy/protocol/definition_pb2_grpc.py
