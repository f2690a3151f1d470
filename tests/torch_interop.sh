#!/usr/bin/env bash
# pipepar plans, PyTorch runs: tests/torch_interop.py loads every kind's CSVs into PyTorch's own
# pipeline runtime in both of its formats and compares the gradients with one process (pp 2 and
# pp 4, gloo on CPU, this machine only). It needs an installed PyTorch and downloads nothing:
# without one it skips, saying why. PYTHON picks the interpreter (default python3), e.g.
#   PYTHON=/path/to/venv/bin/python bash tests/torch_interop.sh
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch.distributed.pipelining' >/dev/null 2>&1; then
    echo "skip torch_interop: $PY cannot import torch.distributed.pipelining (PyTorch not installed here)"
    echo "0 passed, 0 failed"
    exit 0
fi
[ -x build/pipepar ] || make -s host >/dev/null || { echo "FAIL build"; echo "0 passed, 1 failed"; exit 1; }
exec "$PY" tests/torch_interop.py --pipepar build/pipepar "$@"
