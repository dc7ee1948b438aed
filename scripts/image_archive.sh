#!/usr/bin/env bash
# Saves the image scripts/image_test.sh built and checked as an OCI archive (make dist-image),
# then does with the archive what docs/install.md says: `skopeo copy` out of it (into an
# OCI layout on disk here, where a user names their registry), and the copy must be the image
# that was built, down to its configuration's digest.
#
# Needs root (buildah's storage). Installs skopeo when missing.
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
IMAGE=${IMAGE:?IMAGE names the built image}
ARCHIVE=${ARCHIVE:?ARCHIVE names the archive to write, under dist/}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)

step() { printf '%(%H:%M:%S)T image-archive: %s\n' -1 "$*"; }

if ! command -v skopeo >/dev/null; then
    step "installing skopeo"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends skopeo >/dev/null
fi

step "saving $IMAGE as $ARCHIVE"
buildah push --quiet "$IMAGE" "oci-archive:$ARCHIVE:actonce:$VERSION" >/dev/null

# docs/install.md's own line, with a layout on disk for the registry it names.
line=$(grep -o "skopeo copy oci-archive:/path/to/actonce/dist/[^ ]* docker://[^ \`]*" docs/install.md | head -1)
if [ -z "$line" ]; then
    echo "image-archive: docs/install.md says no 'skopeo copy oci-archive:...' line" >&2
    exit 1
fi
source=${line#skopeo copy oci-archive:/path/to/actonce/}
source=${source%% *}
if [ "$source" != "$ARCHIVE" ]; then
    echo "image-archive: docs/install.md copies $source, make dist-image writes $ARCHIVE" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step "skopeo copy oci-archive:$ARCHIVE, as the README says"
skopeo copy --quiet "oci-archive:$ARCHIVE" "oci:$work/layout:actonce:$VERSION"

config_digest() { "$PY" -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])'; }
copied=$(skopeo inspect --raw "oci:$work/layout:actonce:$VERSION" | config_digest)
built=$(skopeo inspect --raw "containers-storage:$IMAGE" | config_digest)
if [ "$copied" != "$built" ]; then
    echo "image-archive: the archive holds $copied, the built image is $built" >&2
    exit 1
fi
step "$ARCHIVE holds $IMAGE ($built)"
