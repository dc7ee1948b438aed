# Deploy: the image (Dockerfile), the Kubernetes manifests (deploy/kubernetes), the Helm
# library chart (deploy/helm) and the monitoring objects (deploy/kubernetes/monitoring).
#
#   make test-deploy   hadolint on the Dockerfile; kubernetes-validate --strict on every
#                      manifest, on each kustomization's rendered output and on the Helm
#                      example chart's; the Prometheus Operator's objects decoded strictly into
#                      its own types; `helm lint --strict`; part of `make test`
#   make image-test    build the Dockerfile with buildah and check the image serves; needs
#                      root, installs buildah and debootstrap when missing; not part of
#                      `make test` (1.5 to 4 minutes on a fresh machine, mostly downloads):
#                      .ci/run calls it
#   make monitoring-screenshot
#                      docs/images/monitoring-prometheus.png: the dashboard's queries drawn by
#                      a real Prometheus scraping a real sidecar (Grafana is not to be had here)
#
# tests/deploy renders the Component and the chart onto sample workloads, and runs promtool and
# a Prometheus server: `test-python` needs kustomize, helm and Debian's prometheus first.

# The oldest Kubernetes with native sidecars on by default, and the newest the validator
# knows: a field one of them lacks fails here, not at `kubectl apply`.
KUBERNETES_VERSIONS := 1.29.0 1.37.0
KUSTOMIZE_VERSION := v5.7.1
HELM_VERSION := v3.22.0
DEPLOY_TOOLS := $(VENV)/.deploy-tools
KUSTOMIZE := $(VENV)/bin/kustomize
KUSTOMIZE_STAMP := $(VENV)/.kustomize-$(KUSTOMIZE_VERSION)
HELM := $(VENV)/bin/helm
HELM_STAMP := $(VENV)/.helm-$(HELM_VERSION)
CHECK_MONITORING := $(VENV)/bin/check-monitoring
CHECK_MONITORING_SRC := $(wildcard deploy/tools/check-monitoring/*.go) \
	deploy/tools/check-monitoring/go.mod deploy/tools/check-monitoring/go.sum
RENDERED := $(VENV)/deploy-check
OVERLAYS := $(wildcard deploy/kubernetes/overlays/*)
# Kustomizations rendered and validated whole; overlays and the Component's sample too.
KUSTOMIZATIONS := base audit-prune audit-migrate artifact-store examples/add-to-a-deployment \
	quickstart inject

TEST_TARGETS += test-deploy

.PHONY: test-deploy hadolint k8s-validate helm-lint image-test deploy-tools prometheus \
	monitoring-screenshot

$(DEPLOY_TOOLS): deploy/tools-requirements.txt | $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -r deploy/tools-requirements.txt
	touch $(DEPLOY_TOOLS)

# kustomize and helm are Go modules: built from their pinned versions with the machine's Go.
$(KUSTOMIZE_STAMP): | $(STAMP)
	GOBIN=$(abspath $(VENV)/bin) GOFLAGS=-buildvcs=false \
		go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	touch $(KUSTOMIZE_STAMP)

$(HELM_STAMP): | $(STAMP)
	GOBIN=$(abspath $(VENV)/bin) GOFLAGS=-buildvcs=false go install \
		-ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" \
		helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	touch $(HELM_STAMP)

$(CHECK_MONITORING): $(CHECK_MONITORING_SRC) | $(STAMP)
	cd deploy/tools/check-monitoring && GOFLAGS=-buildvcs=false go build -o $(abspath $@) .

# promtool and the Prometheus server, from Debian's packages, where missing.
prometheus:
	@if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends \
			prometheus; \
	fi

deploy-tools: $(DEPLOY_TOOLS) $(KUSTOMIZE_STAMP) $(HELM_STAMP) $(CHECK_MONITORING) prometheus

test-python: deploy-tools

# Any finding fails, down to style.
hadolint: $(DEPLOY_TOOLS)
	$(VENV)/bin/hadolint --failure-threshold style Dockerfile

# The example chart, with the library chart as its dependency, rendered as `helm install`
# would render it.
$(RENDERED)/helm-chart: $(HELM_STAMP)
	rm -rf $@ && mkdir -p $@
	cp -r deploy/helm $@/
	$(HELM) dependency build $@/helm/examples/agent >/dev/null

helm-lint: $(RENDERED)/helm-chart
	$(HELM) lint --strict --quiet deploy/helm/actonce $(RENDERED)/helm-chart/helm/examples/agent \
		deploy/helm/actonce-inject

# Every file is validated as it is, except the patches, validated in their rendered
# kustomization (the quickstart's patch says `$patch: delete`, which no schema knows).
# kubernetes-validate knows no PodMonitor or PrometheusRule (hence --no-warn on the monitoring
# objects): check-monitoring decodes those into the Prometheus Operator's own types instead.
k8s-validate: $(DEPLOY_TOOLS) $(KUSTOMIZE_STAMP) $(HELM_STAMP) $(CHECK_MONITORING)
	rm -rf $(RENDERED) && mkdir -p $(RENDERED)
	set -e; for kustomization in $(KUSTOMIZATIONS) $(OVERLAYS:deploy/kubernetes/%=%); do \
		$(KUSTOMIZE) build deploy/kubernetes/$$kustomization \
			> $(RENDERED)/$$(echo $$kustomization | tr / -).yaml; \
	done
	$(MAKE) --no-print-directory $(RENDERED)/helm-chart
	$(HELM) template agent $(RENDERED)/helm-chart/helm/examples/agent > $(RENDERED)/helm-agent.yaml
	# The injection webhook's chart, its certificate made by the chart and by cert-manager
	# (whose Issuer and Certificate the validator knows no schema of, and names).
	$(HELM) template inject deploy/helm/actonce-inject > $(RENDERED)/helm-inject.yaml
	$(HELM) template inject deploy/helm/actonce-inject --set certificates=cert-manager \
		> $(RENDERED)/helm-inject-cert-manager.yaml
	mkdir -p $(RENDERED)/operator
	$(KUSTOMIZE) build deploy/kubernetes/monitoring > $(RENDERED)/operator/monitoring.yaml
	set -e; for version in $(KUBERNETES_VERSIONS); do \
		$(VENV)/bin/kubernetes-validate --strict --quiet -k $$version \
			$(RENDERED)/*.yaml $$(find deploy/kubernetes -name '*.yaml' \
				! -name kustomization.yaml ! -path '*/overlays/*' ! -path '*/components/*' \
				! -path '*/monitoring/*' ! -path '*/quickstart/quickstart.yaml'); \
		$(VENV)/bin/kubernetes-validate --strict --quiet --no-warn -k $$version \
			$(RENDERED)/operator/monitoring.yaml; \
		echo "k8s-validate: every manifest valid (strict) for Kubernetes $$version"; \
	done
	$(CHECK_MONITORING) $(RENDERED)/operator/monitoring.yaml

test-deploy: hadolint k8s-validate helm-lint

image-test: $(STAMP)
	bash scripts/image_test.sh

monitoring-screenshot: deploy-tools browser
	$(PY) scripts/monitoring_screenshot.py docs/images/monitoring-prometheus.png
