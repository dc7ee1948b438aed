"""Fuzz: no input an agent can send breaks the promise. Every request field drawn at
random against a live sidecar (hypothesis), coverage-guided parsing (atheris), bytes that
do not parse, NUL characters, numbers beyond 2^53, and the security checks on what leaves
the sidecar."""
