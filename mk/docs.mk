# The documentation site (mkdocs.yml): the pages under docs/, the README as the home page.
#
#   make docs        check that the generated reference pages are current, then build the
#                    site strict into site/: a broken link or anchor, a page missing from the
#                    nav, any warning fails it
#   make docs-gen    rewrite the reference pages (docs/reference/) from the code
#   make docs-serve  serve the site on 127.0.0.1:8000, rebuilt on each change
#
# `make test` builds it too; tests/docs runs the snippets the pages mark as runnable.

.PHONY: docs docs-gen docs-serve

# The theme's banner about the next MkDocs is advice, not a finding of this build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

docs: $(STAMP)
	$(PY) scripts/gen_reference.py --check
	$(MKDOCS) build --strict --quiet

docs-gen: $(STAMP)
	$(PY) scripts/gen_reference.py

docs-serve: $(STAMP)
	$(MKDOCS) serve --dev-addr 127.0.0.1:8000

TEST_TARGETS += docs
