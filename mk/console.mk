# The operator's console. Included by the Makefile.
#   make browser         Debian's chromium and chromium-driver, installed with apt-get where
#                        missing: the console's browser test (part of `make test`) drives them
#   make console         serve the console over the default ledger (.actonce/audit.db)
# Selenium drives the installed chromedriver: nothing is downloaded at test time.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: browser console

browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y \
			chromium chromium-driver; \
	fi

test-python: browser

console: $(STAMP)
	$(VENV)/bin/actonce console
