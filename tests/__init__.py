"""The tests. Unit tests mirror the package: tests/<folder>/test_<module>.py tests
sidecar/<folder>/<module>.py (rules, core, ledger, upstream, refstore, fronts, console,
ops), and the chaos harness's own checks sit in tests/chaos. Four suites cut across the
package, each named for what it proves: integration, faults, fuzz and server (see each
folder's opening). tests/helpers holds what the suites share, each written once.
"""
