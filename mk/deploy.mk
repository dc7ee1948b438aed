# Deploy: the image (Dockerfile) and the Kubernetes manifests (deploy/kubernetes).
#
#   make test-deploy   hadolint on the Dockerfile, kubernetes-validate --strict on every
#                      manifest and on each kustomization's rendered output; part of `make test`
#   make image-test    build the Dockerfile with buildah and check the image serves; needs
#                      root, installs buildah and debootstrap when missing; not part of
#                      `make test` (1.5 to 4 minutes on a fresh machine, mostly downloads):
#                      .ci/run calls it

# The oldest Kubernetes with native sidecars on by default, and the newest the validator
# knows: a field one of them lacks fails here, not at `kubectl apply`.
KUBERNETES_VERSIONS := 1.29.0 1.37.0
KUSTOMIZE_VERSION := v5.7.1
DEPLOY_TOOLS := $(VENV)/.deploy-tools
KUSTOMIZE := $(VENV)/bin/kustomize
KUSTOMIZE_STAMP := $(VENV)/.kustomize-$(KUSTOMIZE_VERSION)
RENDERED := $(VENV)/deploy-check
OVERLAYS := $(wildcard deploy/kubernetes/overlays/*)

TEST_TARGETS += test-deploy

.PHONY: test-deploy hadolint k8s-validate image-test deploy-tools

$(DEPLOY_TOOLS): deploy/tools-requirements.txt | $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -r deploy/tools-requirements.txt
	touch $(DEPLOY_TOOLS)

# kustomize is a Go module: built from its pinned version with the machine's Go.
$(KUSTOMIZE_STAMP): | $(STAMP)
	GOBIN=$(abspath $(VENV)/bin) GOFLAGS=-buildvcs=false \
		go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	touch $(KUSTOMIZE_STAMP)

deploy-tools: $(DEPLOY_TOOLS) $(KUSTOMIZE_STAMP)

# Any finding fails, down to style.
hadolint: $(DEPLOY_TOOLS)
	$(VENV)/bin/hadolint --failure-threshold style Dockerfile

k8s-validate: $(DEPLOY_TOOLS) $(KUSTOMIZE_STAMP)
	rm -rf $(RENDERED) && mkdir -p $(RENDERED)
	$(KUSTOMIZE) build deploy/kubernetes/base > $(RENDERED)/base.yaml
	$(KUSTOMIZE) build deploy/kubernetes/audit-prune > $(RENDERED)/audit-prune.yaml
	set -e; for overlay in $(OVERLAYS); do \
		$(KUSTOMIZE) build $$overlay > $(RENDERED)/$$(basename $$overlay).yaml; \
	done
	set -e; for version in $(KUBERNETES_VERSIONS); do \
		$(VENV)/bin/kubernetes-validate --strict --quiet -k $$version \
			$(RENDERED)/*.yaml $$(find deploy/kubernetes -name '*.yaml' \
				! -name kustomization.yaml ! -path '*/overlays/*'); \
		echo "k8s-validate: every manifest valid (strict) for Kubernetes $$version"; \
	done

test-deploy: hadolint k8s-validate

image-test: $(STAMP)
	bash scripts/image_test.sh
