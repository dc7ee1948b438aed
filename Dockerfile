# actonce sidecar image: `actonce serve` as an unprivileged user, ledger and embedded store
# under /var/lib/actonce.
#
# Two stages: the first builds a virtualenv with pip (which needs network and a package build
# backend), the second copies only that virtualenv onto a plain Debian with its Python
# interpreter, so no compiler, pip cache or build tool reaches the final image. Both stages use
# the same base so that the virtualenv's interpreter path (/usr/bin/python3) exists in both.
#
# Debian package versions are pinned so that a rebuild cannot silently change the interpreter;
# bump them together with the base image.

FROM debian:bookworm-slim AS build

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates=20250419~deb12u2 \
        python3=3.11.2-1+b1 \
        python3-venv=3.11.2-1+b1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY requirements/image.txt ./requirements/
COPY sidecar ./sidecar
# sidecar/inject/component links here: `actonce inject` adds the Component's own sidecar.
COPY deploy/kubernetes/components/sidecar ./deploy/kubernetes/components/sidecar
# The generated stubs (actonce_api): one copy, kept beside the Python client, packaged from there.
COPY clients/python/src/actonce_api ./clients/python/src/actonce_api

# requirements/image.txt names every package the image holds (the dependencies of
# '.[all]' and the build backend) at the versions the tests ran with, each with the hashes of
# its files: pip installs nothing else (--require-hashes), and a file that is not the one
# pinned is refused. The sidecar itself is then built from this source with that backend,
# and nothing more is fetched (--no-deps, --no-build-isolation); `pip check` says every
# dependency is there. A network that re-signs TLS can hand its CA in as the optional build
# secret `ca-bundle`; a secret mount is never written into a layer.
RUN --mount=type=secret,id=ca-bundle,required=false \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/actonce \
    && /opt/actonce/bin/pip install --require-hashes --no-deps -r requirements/image.txt \
    && /opt/actonce/bin/pip install --no-deps --no-build-isolation '.[all]' \
    && /opt/actonce/bin/pip check \
    && /opt/actonce/bin/pip uninstall -y pip setuptools

FROM debian:bookworm-slim

ENV DEBIAN_FRONTEND=noninteractive

# Only the interpreter: the virtualenv from the build stage carries every Python dependency.
# A fixed numeric user lets Kubernetes verify runAsNonRoot without resolving names.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --no-create-home \
        --home-dir /var/lib/actonce --shell /usr/sbin/nologin actonce \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/actonce

COPY --from=build /opt/actonce /opt/actonce

# Loopback is reachable from every container of the pod (they share its network namespace)
# and from nothing outside it. Health and metrics stay off until a deployment names a port
# for them (ACTONCE_HEALTH_LISTEN, ACTONCE_METRICS_LISTEN): the kubelet and Prometheus reach
# the pod's address, not its loopback.
ENV PATH=/opt/actonce/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ACTONCE_LISTEN=127.0.0.1:50051 \
    ACTONCE_DATA_DIR=/var/lib/actonce \
    ACTONCE_LOG_FORMAT=json

VOLUME ["/var/lib/actonce"]
WORKDIR /var/lib/actonce
USER 10001:10001
EXPOSE 50051

ENTRYPOINT ["actonce", "serve"]
