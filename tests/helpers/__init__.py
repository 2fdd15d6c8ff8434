"""What test modules share, by subject; tests/conftest.py keeps the fixtures and hooks.

pytest puts tests/ on sys.path (tests/ is no package: its rootdir-relative "prepend" import mode), in
the main process and in every pytest-xdist worker, so a test module imports `from helpers.running
import run`, as conftest.py does.

running.py    the repository, the environment a subprocess gets, the entry points run in subprocesses
              (run, train_cmd), tiny training settings, import lists of `python -X importtime`
runs.py       reading what a run wrote: its MLPerf log, its JSON records, the official checker's verdict
jobs.py       watching a job from outside: its processes, its log's progress, a bounded wait
four_node.py  hostfiles/4node with its placeholder filled in, as the headline command's dry run asks
made_logs.py  hand-made MLPerf result logs and the results/<system>/<benchmark> layout around them
published.py  the published MLPerf result folders kept under tests/data/published
report.py     hand-made sweep folders for suite.cluster.report, and parsers of what it writes
deploy.py     suite.cluster.deploy's cases (the goldens' command lines), rendering and its CLI's errors
mpijob.py     what the MPI Operator and Kubernetes require of a rendered MPIJob
"""
