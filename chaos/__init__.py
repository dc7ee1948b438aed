"""The crash harness: seeded runs of a scripted agent against real sidecar and store processes.

A seed decides everything that is decided up front: the plan of writes each run makes
(``plan``), where the store runs (inside the sidecar or as a process of its own), and when
the harness kills a process with SIGKILL and for how long it stays down. ``agent`` plays the
agent and the queue: it makes the plan's writes through the sidecar and, whenever an attempt
fails, begins a new attempt from the run's last checkpoint until one finishes. ``processes``
starts, kills and restarts ``actonce serve`` and ``actonce store``. ``checker`` then reads the
store's database and the audit ledger directly, trusting nothing the sidecar answered, and
``report`` sums seeds up.

``python -m chaos --seeds 200 --backend sqlite`` runs seeds 0..199; a failing seed is printed
and ``python -m chaos --seed N --backend ...`` replays its plan and kill schedule. With
``--backend postgres --sidecars N`` each seed runs N sidecars sharing its ledger (of many
chains, as a new PostgreSQL one is) and its store: each attempt of a run, redeliveries and
twins included, goes to one the seed picks, each kill and freeze hits one, and the checker
reads the one ledger and store as with one (a replay needs the same ``--sidecars``). Process
timing is the operating system's, so a replay makes the same calls and kills at the same call
counts, not at the same microsecond.
"""
