# Releases. Included by the Makefile.
#   make dist           every artifact a user installs, into dist/: the packages below and the
#                       image (dist-image needs root, as image-test does)
#   make dist-packages  the sidecar's wheel, the Python client's wheel, the TypeScript tarball
#                       (npm pack) and the Java jar: what the install test installs from
#   make dist-python    the two wheels alone, with Python and nothing else: no Node, no
#                       Maven, not even the development install (tests/test_dist_targets.py)
#   make dist-typescript, dist-java, dist-go   one client each, with its own tool alone; Go's
#                       is its module's source, built and vetted, as a zip
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

GO_ZIP := $(DIST)/actonce-client-go-$(VERSION).zip

.PHONY: dist dist-packages dist-image dist-python dist-typescript dist-java dist-go

dist: dist-packages dist-go dist-image

dist-packages: dist-python dist-typescript dist-java

dist-python: $(SIDECAR_WHEEL) $(CLIENT_WHEEL)

dist-typescript: $(TS_TARBALL)

dist-java: $(JAVA_JAR)

dist-go: $(GO_ZIP)

# Rebuilt whenever asked: a wheel's inputs are most of the tree.
.PHONY: $(SIDECAR_WHEEL) $(CLIENT_WHEEL) $(TS_TARBALL) $(JAVA_JAR) $(GO_ZIP) pin-hashes

# A wheel is the same bytes however often one commit is built: every file in it is dated the
# commit's time (SOURCE_DATE_EPOCH, which the build backend honours), not the build's, and
# the backend is the one version requirements/build.txt pins by its hashes, installed with
# --require-hashes into a virtualenv of its own, where the wheels build without isolation
# (an isolated build would fetch the backend again, unhashed).
COMMIT_TIME := $(shell git log -1 --format=%ct 2>/dev/null)
BUILD_VENV := $(VENV)/wheel-build
BUILD_STAMP := $(BUILD_VENV)/.installed
WHEEL_BUILD := SOURCE_DATE_EPOCH=$(COMMIT_TIME) $(BUILD_VENV)/bin/python -m pip wheel --quiet \
	--disable-pip-version-check --no-deps --no-build-isolation

# Made with the machine's Python, not the development install: building a wheel needs the
# pinned backend alone.
$(BUILD_STAMP): requirements/build.txt
	rm -rf $(BUILD_VENV) && $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes --no-deps -r requirements/build.txt
	touch $(BUILD_STAMP)

# setuptools builds in build/ of the source folder and keeps what it finds there: a module
# deleted since the last build would ship again, so each wheel starts from none.
$(SIDECAR_WHEEL): $(BUILD_STAMP)
	test -n "$(COMMIT_TIME)" || { echo "a wheel is dated by its commit: no git commit here"; exit 1; }
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-*.whl && rm -rf build
	$(WHEEL_BUILD) --wheel-dir $(DIST) .

$(CLIENT_WHEEL): $(BUILD_STAMP)
	test -n "$(COMMIT_TIME)" || { echo "a wheel is dated by its commit: no git commit here"; exit 1; }
	mkdir -p $(DIST) && rm -f $(DIST)/actonce_client-*.whl && rm -rf clients/python/build
	$(WHEEL_BUILD) --wheel-dir $(DIST) ./clients/python

# The hashed pins (requirements/): what the image installs (the dependencies of '.[all]' and
# the build backend) and what the wheels build with, at the versions constraints.txt names,
# each with the hashes of its files. Run after changing a dependency or constraints.txt;
# pip-tools runs from a virtualenv of its own.
PIN_TOOLS := $(VENV)/pin-tools
PIP_COMPILE := $(PIN_TOOLS)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	--strip-extras --no-emit-index-url --no-emit-find-links --build-deps-for wheel

pin-hashes: | $(STAMP)
	test -x $(PIN_TOOLS)/bin/pip-compile || { $(PY) -m venv $(PIN_TOOLS) \
		&& $(PIN_TOOLS)/bin/pip install --quiet pip-tools; }
	$(PIP_COMPILE) --extra all -c constraints.txt --output-file requirements/image.txt \
		pyproject.toml
	# The sidecar itself is built from the source beside it, not installed from a pin.
	sed -i -e '/^# WARNING: pip install will require/,/^actonce @ /d' \
		-e '/^    # via actonce (pyproject.toml)$$/d' requirements/image.txt
	$(PIP_COMPILE) --only-build-deps --output-file requirements/build.txt pyproject.toml

# Made again when a source of the client or its package.json changed.
$(TS_TARBALL): $(TS_CLIENT_STAMP) $(TS_CLIENT)/package.json $(wildcard $(TS_CLIENT)/src/*.ts)
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-client-*.tgz
	cd $(TS_CLIENT) && npm pack --silent --pack-destination $(abspath $(DIST)) >/dev/null

# Go has no package to build: a module is its source. The zip holds clients/go as committed,
# once it builds and vets with Go alone.
$(GO_ZIP):
	cd clients/go && go build ./... && go vet ./...
	mkdir -p $(DIST) && rm -f $(DIST)/actonce-client-go-*.zip
	git archive --format=zip --output $(GO_ZIP) HEAD clients/go

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
