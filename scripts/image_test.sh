#!/usr/bin/env bash
# Proves the real Dockerfile builds and serves, on a machine with no container engine.
#
# 1. Makes the Dockerfile's base image from Debian's own packages (debootstrap) and stores it
#    under the very name the Dockerfile's FROM lines use, so the build resolves it locally and
#    never pulls.
# 2. Builds the Dockerfile with buildah (chroot isolation needs no daemon and no user
#    namespaces).
# 3. Starts the image's ENTRYPOINT in a container with `buildah run`, as the image's own user
#    and environment, and asks grpc.health.v1 until it answers SERVING.
#
# Needs root (debootstrap, buildah's storage). Installs buildah and debootstrap when missing.
# Leaves the built image as $IMAGE; removes its containers.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PY:-$REPO/.venv/bin/python}
IMAGE=${IMAGE:-localhost/actonce:image-test}
SUITE=${SUITE:-bookworm}
WORK=${IMAGE_TEST_WORK:-/var/tmp/actonce-image-test}
# No daemon and no user namespaces needed; `buildah run` shares this machine's network.
export BUILDAH_ISOLATION=chroot

step() { printf '%(%H:%M:%S)T image-test: %s\n' -1 "$*"; }

if [ "$(id -u)" != 0 ]; then
    echo "image-test: needs root (debootstrap and buildah's storage)" >&2
    exit 2
fi

if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
    step "installing buildah and debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        buildah debootstrap >/dev/null
fi

# Every stage must start from the one base this script can make.
# A FROM that names an earlier stage (FROM x AS name ... FROM name) is not a base image.
mapfile -t bases < <(awk 'toupper($1) == "FROM" {
        if (!($2 in stage)) print $2
        if (toupper($3) == "AS") stage[$4] = 1
    }' Dockerfile | sort -u)
if [ "${#bases[@]}" != 1 ]; then
    echo "image-test: expected one base image in Dockerfile, found: ${bases[*]}" >&2
    exit 1
fi
BASE=${bases[0]}
case $BASE in
    */*) BASE_REF=$BASE ;;
    *) BASE_REF=docker.io/library/$BASE ;;
esac

if buildah inspect --type image "$BASE_REF" >/dev/null 2>&1; then
    step "base $BASE_REF already stored"
else
    step "making base $BASE_REF with debootstrap ($SUITE, minbase)"
    rm -rf "$WORK/rootfs"
    mkdir -p "$WORK"
    debootstrap --variant=minbase "$SUITE" "$WORK/rootfs" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    # debootstrap writes only the release's main suite, from the mirror it used; an image
    # needs its updates and security suites too, as Debian's own images carry.
    mirror=$(awk '$1 == "deb" {print $2; exit}' "$WORK/rootfs/etc/apt/sources.list")
    {
        echo "deb $mirror $SUITE main"
        echo "deb $mirror $SUITE-updates main"
        echo "deb ${mirror%/debian}/debian-security $SUITE-security main"
    } >"$WORK/rootfs/etc/apt/sources.list"
    # What makes Debian's "-slim" images slim: no documentation, manual pages or translations,
    # now or from any package installed later.
    printf '%s\n' \
        'path-exclude /usr/share/doc/*' \
        'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' \
        'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' \
        'path-include /usr/share/locale/locale.alias' \
        'path-exclude /usr/share/lintian/*' \
        >"$WORK/rootfs/etc/dpkg/dpkg.cfg.d/slim"
    find "$WORK/rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$WORK/rootfs/usr/share/man/"* "$WORK/rootfs/usr/share/info/"*
    find "$WORK/rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
        -exec rm -rf {} +
    chroot "$WORK/rootfs" apt-get clean
    rm -rf "$WORK/rootfs/var/lib/apt/lists/"* "$WORK/rootfs/var/cache/apt/"*.bin
    tar -C "$WORK/rootfs" --numeric-owner -cf "$WORK/rootfs.tar" .
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$WORK/rootfs.tar" / >/dev/null
    buildah config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
    buildah commit --quiet --rm "$ctr" "$BASE_REF" >/dev/null
    rm -rf "$WORK/rootfs" "$WORK/rootfs.tar"
fi

step "building Dockerfile as $IMAGE"
secret=()
# Where the network re-signs TLS, pip in the build needs this machine's CA bundle; it reaches
# the build as a secret, never a layer.
for bundle in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$bundle" ] && [ -s "$bundle" ]; then
        secret=(--secret "id=ca-bundle,src=$bundle")
        break
    fi
done
# Each RUN step re-executes buildah from a sealed in-memory copy of itself. Sealing that copy
# fails with EBUSY while the kernel still counts a reference to one of its pages from another
# CPU's page cache batch, which a busy machine shows now and then ("sealing memfd copy: Device
# or resource busy"). Nothing of the build is wrong then, so only that failure is tried again.
build() {
    buildah build --quiet --isolation chroot --pull-never "${secret[@]}" \
        -f Dockerfile -t "$IMAGE" . >"$WORK/build.log" 2>&1
}
for try in 1 2 3; do
    build && break
    if [ "$try" = 3 ] || ! grep -q 'sealing memfd copy: Device or resource busy' "$WORK/build.log"; then
        tail -40 "$WORK/build.log" >&2
        exit 1
    fi
    step "buildah could not seal its own copy (EBUSY); building again"
done

step "checking the image's configuration"
"$PY" scripts/image_check.py config "$(buildah inspect --type image "$IMAGE")"

ctr=$(buildah from --pull-never "$IMAGE")
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
probes=$(free_port)
metrics=$(free_port)
mapfile -t entrypoint < <(buildah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}' "$IMAGE" | sed '/^$/d')
step "starting ${entrypoint[*]} in the image on 127.0.0.1:$port"
# chroot isolation shares this machine's network, so the sidecar's loopback is ours; the
# image's own user and environment apply, only the port is moved off the default.
buildah run --isolation chroot \
    --env "ACTONCE_LISTEN=127.0.0.1:$port" \
    --env "ACTONCE_HEALTH_LISTEN=127.0.0.1:$probes" \
    --env "ACTONCE_METRICS_LISTEN=127.0.0.1:$metrics" \
    "$ctr" -- "${entrypoint[@]}" >"$WORK/serve.log" 2>&1 &
server_pid=$!

for target in "127.0.0.1:$port" "127.0.0.1:$probes"; do
    step "asking grpc.health.v1 on $target"
    if ! "$PY" scripts/image_check.py health "$target" --timeout 60; then
        tail -20 "$WORK/serve.log" >&2
        exit 1
    fi
done
step "scraping metrics on 127.0.0.1:$metrics"
"$PY" -c 'import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
sys.exit(0 if "actonce_draining 0.0" in text else "image-test: no actonce metrics")' "$metrics"

step "checking who it runs as and that no build tool came along"
uid=$(buildah run --isolation chroot "$ctr" -- id -u)
if [ "$uid" = 0 ]; then
    echo "image-test: the image runs as root" >&2
    exit 1
fi
for tool in gcc cc make pip pip3; do
    if buildah run --isolation chroot "$ctr" -- sh -c "command -v $tool" >/dev/null 2>&1; then
        echo "image-test: $tool is in the final image" >&2
        exit 1
    fi
done
grep -q '"event": "serving"' "$WORK/serve.log" \
    || { echo "image-test: no JSON 'serving' line in the log" >&2; cat "$WORK/serve.log" >&2; exit 1; }
step "image serves: SERVING as uid $uid"
