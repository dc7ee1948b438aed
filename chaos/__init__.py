"""The crash harness: seeded runs of a scripted agent against real sidecar and store processes.

A seed decides everything that is decided up front (``plan``): the writes each run makes
(``plan_writes``), where the store runs (inside the sidecar or as a process of its own), when
the harness kills a process with SIGKILL and for how long it stays down (``plan_kills``), and
what time does (``plan_time``). ``agent`` plays the agent and the queue: it makes the plan's
writes through the sidecar (its scripted model in ``agent_model``, its tool calls in
``agent_tools``, its calls in ``agent_calls`` and ``sidecar_api``) and, whenever an attempt
fails, begins a new attempt from the run's last checkpoint until one finishes. ``processes``
starts, kills and restarts ``actonce serve`` and ``actonce store``, and ``play`` runs a
seed's agents against them. ``checker`` then reads the store's database (``store_snapshot``)
and the audit ledger directly, trusting nothing the sidecar answered, and holds them against
the plan's model (``expected``), one kind of check a module (``check_ledger``,
``check_gateway``, ``check_decisions``). ``runner`` takes a seed from start to verdict, and
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
