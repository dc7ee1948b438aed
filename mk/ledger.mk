# The audit ledger. Included by the Makefile.
#   make faketime   Debian's faketime and libfaketime, installed with apt-get where missing:
#                   the ledger's slow-clock test (part of `make test`) runs a sidecar whose
#                   clock is hours behind with them
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: faketime

faketime:
	@if ! command -v faketime >/dev/null; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y faketime libfaketime; \
	fi

test-python: faketime
