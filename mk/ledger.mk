# The audit ledger. Included by the Makefile.
#   make faketime   Debian's faketime and libfaketime, installed with apt-get where missing:
#                   the ledger's slow-clock test (part of `make test`) runs a sidecar whose
#                   clock is hours behind with them
#   make pgbouncer  Debian's PgBouncer, installed with apt-get where missing: the pooler tests
#                   (part of `make test`) run a fleet behind it in transaction mode
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: faketime pgbouncer

faketime:
	@if ! command -v faketime >/dev/null; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y faketime libfaketime; \
	fi

# Installed only: the tests run pgbouncers of their own, each on a free port.
pgbouncer:
	@if ! [ -x /usr/sbin/pgbouncer ] && ! command -v pgbouncer >/dev/null; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y pgbouncer; \
	fi

test-python: faketime pgbouncer
