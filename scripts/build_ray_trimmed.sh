#!/usr/bin/env bash
# Build the trimmed Ray install for the H200 (cp312; no network there, and a device call carries at most 64 MiB:
# the plain wheel is 75.65 MiB). Ray's version comes from constraints.txt. Writes the git-ignored
#   .whl/ray-trimmed-cp312.tar.xz   (about 27 MiB: reference/dependencies.md §3)
# holding site/ (ray without ray/jars (Java), ray/rllib and the dashboard's web assets, plus the dependencies the
# image lacks: jsonschema, jsonschema-specifications, referencing, rpds-py, attrs). On the GPU machine:
#   mkdir -p /tmp/ray && tar -xJf .whl/ray-trimmed-cp312.tar.xz -C /tmp/ray && export PYTHONPATH=/tmp/ray/site:$PYTHONPATH
#   aura-omni serve --deploy-config configs/aura_omni.yaml --distributed-executor-backend ray   (docs/ray.md)
# TRIM_LIBRARIES=1 also drops Ray's libraries aura-omni never imports (data, train, tune, serve, llm): about 30 MiB
# less unpacked; the core (tasks, actors, runtime_env, the dashboard agent) stays.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pin() { grep -i -m1 "^$1==" constraints.txt || echo "$1"; }
SPECS="$(pin ray) $(pin jsonschema) $(pin jsonschema-specifications) $(pin referencing) $(pin rpds-py) $(pin attrs)"
mkdir -p "$DEST" "$WORK/wheels" "$WORK/site"
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
grep -qxF "/$DEST/" "$EXCLUDE" 2>/dev/null || echo "/$DEST/" >> "$EXCLUDE"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/wheels" $SPECS
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" \
  --python-version 3.12 --implementation cp --only-binary=:all: "$WORK"/wheels/*.whl
rm -rf "$WORK/site/ray/jars" "$WORK/site/ray/rllib" "$WORK/site/ray/dashboard/client/build" "$WORK/site/bin"
if [ "${TRIM_LIBRARIES:-0}" = 1 ]; then
  rm -rf "$WORK"/site/ray/{data,train,tune,serve,llm}
fi
find "$WORK/site" -name __pycache__ -type d -prune -exec rm -rf {} +
du -sh "$WORK/site/ray"
XZ_OPT=${XZ_OPT:-"-9 -T0"} tar -cJf "$DEST/ray-trimmed-cp312.tar.xz" -C "$WORK" site
ls -l "$DEST/ray-trimmed-cp312.tar.xz"
