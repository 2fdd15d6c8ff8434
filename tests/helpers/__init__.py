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
failures.py   how a failed run looks from outside: one error line, each rank's tagged lines, the log
launch_cli.py suite.cluster.launch in a subprocess, the OCI profile's variables, filled hostfiles
launch_paths.py  the launch paths a namespace cluster trains through, and how env.json names each
sweep.py      the sweep tests' submitter, timeline request, stop bound and temporary files
summarizer.py result_summarizer's arithmetic, and a log as a two-rank launcher prints it
attribution.py   what a real multi-rank run's step split must satisfy
atimes.py     when a rank first read a file, from its access time
bert_reference.py  BERT's forward pass in NumPy, with a tiny config and random inputs
"""
