# grpcurl, the reflection client tests/ops/test_reflection.py asks `describe` with, built from
# its pinned Go module with the machine's Go into .tools/, as ghz is (mk/bench.mk).
GRPCURL_VERSION := v1.9.4
GRPCURL_BIN := $(CURDIR)/.tools/grpcurl-$(GRPCURL_VERSION)
GRPCURL := $(GRPCURL_BIN)/grpcurl

.PHONY: grpcurl

$(GRPCURL):
	GOBIN=$(GRPCURL_BIN) GOFLAGS=-buildvcs=false $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

grpcurl: $(GRPCURL)

test-python: $(GRPCURL)
