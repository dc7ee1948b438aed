# Releases. Included by the Makefile.
#   make dist           every artifact a user installs, into dist/: the packages below and the
#                       image (dist-image needs root, as image-test does)
#   make dist-packages  the sidecar's wheel, the Python client's wheel, the TypeScript tarball
#                       (npm pack) and the Java jar: what the install test installs from
#   make dist-image     the Dockerfile built and checked (scripts/image_test.sh), saved as an
#                       OCI archive
# Every artifact carries VERSION, the one in pyproject.toml; tests/test_release.py holds the
# clients' versions and the CHANGELOG to it.
DIST := dist
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -1)
SIDECAR_WHEEL := $(DIST)/actonce-$(VERSION)-py3-none-any.whl
CLIENT_WHEEL := $(DIST)/actonce_client-$(VERSION)-py3-none-any.whl
TS_TARBALL := $(DIST)/actonce-client-$(VERSION).tgz
JAVA_JAR := $(DIST)/actonce-client-$(VERSION).jar
IMAGE_ARCHIVE := $(DIST)/actonce-$(VERSION).oci.tar
DIST_IMAGE := localhost/actonce:$(VERSION)

.PHONY: dist dist-packages dist-image

dist: dist-packages dist-image

dist-packages: $(SIDECAR_WHEEL) $(CLIENT_WHEEL) $(TS_TARBALL) $(JAVA_JAR)

# Rebuilt whenever asked: a wheel's inputs are most of the tree.
.PHONY: $(SIDECAR_WHEEL) $(CLIENT_WHEEL) $(TS_TARBALL) $(JAVA_JAR)

# setuptools builds in build/ of the source folder and keeps what it finds there: a module
# deleted since the last build would ship again, so each wheel starts from none.
$(SIDECAR_WHEEL): $(STAMP)
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-*.whl && rm -rf build
	$(PIP_WHEEL) --wheel-dir $(DIST) .

$(CLIENT_WHEEL): $(STAMP)
	mkdir -p $(DIST) && rm -f $(DIST)/actonce_client-*.whl && rm -rf clients/python/build
	$(PIP_WHEEL) --wheel-dir $(DIST) ./clients/python

$(TS_TARBALL): $(TS_CLIENT_STAMP)
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-client-*.tgz
	cd $(TS_CLIENT) && npm pack --silent --pack-destination $(abspath $(DIST)) >/dev/null

$(JAVA_JAR):
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-client-*.jar
	cd clients/java && mvn -q -B -Dstyle.color=never package -DskipTests
	cp clients/java/target/actonce-client-$(VERSION).jar $(JAVA_JAR)

# The image as image-test builds and checks it, then saved where `skopeo copy` and
# `podman load` take it from; the archive is read back to check it holds the image.
dist-image: $(STAMP)
	IMAGE=$(DIST_IMAGE) bash scripts/image_test.sh
	mkdir -p $(DIST) && rm -f $(IMAGE_ARCHIVE)
	IMAGE=$(DIST_IMAGE) ARCHIVE=$(IMAGE_ARCHIVE) bash scripts/image_archive.sh
test-clients-crosslang: dist-packages
# The Python client's suite runs each framework guide's complete agent from its wheel.
test-clients-python: $(CLIENT_WHEEL)
