#!/bin/bash
# GENERATED — do not edit; run `imagesmith render`
# One wheel layer of the layer plan (docs/matrix.md "The layer plan"). Each layer's RUN in the Dockerfile
# bind-mounts this script at /tmp/ctx/wheel-layer.sh and the layer's pin file (layers/NN-<name>.txt, rendered from
# the lock with its sha256 lines) at /tmp/ctx/layer.txt, with the shared wheelhouse cache and the extra CA as
# the BuildKit secret imagesmith-ca; the argument names the pin file (for the build log and the image
# history). Every pin is fetched into the wheelhouse and put into /opt/venv --no-deps at its exact version
# and sha256 (pip's hash-checking mode).
# The layer's bytes depend only on the wheels and the venv: .pyc compiled by hash (SOURCE_DATE_EPOCH), every
# path the step touched (and the folders above the venv) stamped with that same time, so the same wheel makes
# the same layer digest in every cell and every build. The CA bundle /tmp/ca.pem is deleted before the step
# ends: no layer holds it.
set -euo pipefail
layer="${1:?usage: wheel-layer.sh layers/NN-name.txt (the pin file mounted at /tmp/ctx/layer.txt)}"
if ! grep -q '^[A-Za-z0-9].*==' /tmp/ctx/layer.txt; then
    echo "imagesmith: ${layer}: no pin at /tmp/ctx/layer.txt (is the pin file bind-mounted there?)" >&2
    exit 1
fi
echo "imagesmith: wheel layer ${layer}"
cat /etc/ssl/certs/ca-certificates.crt /run/secrets/imagesmith-ca > /tmp/ca.pem 2>/dev/null || true
touch /tmp/imagesmith-layer-start
export SOURCE_DATE_EPOCH=315532800
PIP_CONFIG_FILE=/dev/null /opt/venv/bin/python -m pip download --no-cache-dir --no-deps --require-hashes --cert /tmp/ca.pem \
      --dest /var/cache/imagesmith/wheels \
      ${IMAGESMITH_PIP_INDEX_URL:+--index-url "${IMAGESMITH_PIP_INDEX_URL}"} \
      ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
      --disable-pip-version-check -r /tmp/ctx/layer.txt
PIP_CONFIG_FILE=/dev/null /opt/venv/bin/python -m pip install --no-cache-dir --no-index --no-deps --require-hashes \
      --find-links /var/cache/imagesmith/wheels --disable-pip-version-check -r /tmp/ctx/layer.txt
find /opt/venv -xdev -newer /tmp/imagesmith-layer-start -print0 | xargs -0 -r touch -h -d @315532800
rm -f /tmp/imagesmith-layer-start
rm -f /tmp/ca.pem
touch -h -d @315532800 /tmp /opt /opt/venv /opt/venv/lib /opt/venv/lib/python3.11
