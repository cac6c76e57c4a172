#!/bin/sh
# Create the pipecat baseline's own virtual environment (never voicecore's): pipecat-ai 1.14 with the
# FastAPI WebSocket transport. Usage: bench/baseline_pipecat/setup_venv.sh [VENV_DIR]
# Default VENV_DIR: $VOICECORE_PIPECAT_VENV or ~/.cache/voicecore-bench/pipecat-venv
set -eu
VENV="${1:-${VOICECORE_PIPECAT_VENV:-$HOME/.cache/voicecore-bench/pipecat-venv}}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q 'pipecat-ai[websocket]==1.14.*' fastapi uvicorn websockets
echo "$VENV"
