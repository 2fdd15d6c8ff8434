"""The tests' fixtures and hooks: small datasets, the report of a good sweep, the four-host cluster, and the
marks a test gets from the fixtures it asks for. The helpers test modules share are in tests/helpers/."""
import os

import pytest

from helpers.four_node import filled_hostfile
from helpers.running import BERT_PRED, BERT_SEQ

# The session's Slurm cluster fixture (`slurm`), built only when a test asks for it; the CPU census of
# each test, when SUITE_TEST_CENSUS names a file (tests/census.py).
pytest_plugins = ("slurmcluster", "census")

# The session fixtures that build namespace clusters (four_hosts below, slurm and slurm4 in slurmcluster.py):
# a test that asks for one is serial wherever it lives, so `make test` runs it in its second phase, beside
# at most one other such test (each pytest-xdist worker's clusters have names of their own:
# twohosts.worker_prefix).
CLUSTER_FIXTURES = {"four_hosts", "slurm", "slurm4"}
# The runs too large for anything beside them: the 32-rank headline run (about 21 GB over its four hosts)
# and BERT-large's closed code path (about 14 GB in one process). `make test` runs a test that asks for
# one in its third phase, alone.
ALONE_FIXTURES = {"headline", "large_run"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if CLUSTER_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.serial)
        if ALONE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.alone)


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """A learnable 4-class dataset with 32 px images: 64 train and 40 eval records, uneven shards."""
    from models.resnet50 import prepare
    out = tmp_path_factory.mktemp("small_data")
    prepare.write_learnable_dataset(str(out), num_classes=4, train_per_class=16, eval_per_class=10,
                                    image_size=32, train_shards=4, eval_shards=3, seed=1)
    return str(out)


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory):
    """The generated learnable set at 64 tokens / 10 predictions, with its tiny bert_config.json: one
    per test session (per worker), shared by every module that trains BERT."""
    from models.bert import prepare
    out = tmp_path_factory.mktemp("bert") / "data"
    prepare.write_learnable_dataset(str(out), seq_length=BERT_SEQ, max_predictions=BERT_PRED,
                                    train_records=2048, eval_records=512, train_shards=4, eval_shards=2,
                                    seed=1)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The report of a good sweep (a straggler, step splits) beside Dell's published 8-GPU ResNet-50
    folder (--compare), once per test_report_* file: (its sweep folder, report.md). The sweep is
    tests/helpers/report.py's, which every report test shares."""
    from suite.cluster import report
    from helpers.published import DELL_8
    from helpers.report import STRONG_SPLIT, make_sweep
    folder = make_sweep(str(tmp_path_factory.mktemp("built") / "sweep"), slow_rank=1, split=STRONG_SPLIT)
    assert report.main([folder, "--compare", DELL_8[0]]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        return folder, handle.read()


@pytest.fixture
def no_cluster_tools(monkeypatch):
    """The renderer asks sinfo, sacctmgr and kubectl where they answer: here they never do, unless a
    test gives stand-ins (the deploy test modules use it throughout: pytestmark)."""
    from suite.cluster.deploy import job as deploy_job
    monkeypatch.setattr(deploy_job, "QUERY_PATH", os.devnull)


# ---- the four-host cluster ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def four_hosts(tmp_path_factory):
    """Four namespace hosts on one bridge, named as the filled hostfiles/4node names them; built once
    per session for every test that asks, torn down at its end (also after a failure)."""
    from suite.cluster import hostfile
    from twohosts import BridgedHosts, ClusterUnavailable
    folder = tmp_path_factory.mktemp("fourhosts")
    names = [host.name for host in hostfile.parse(filled_hostfile(folder))]
    try:
        with BridgedHosts(folder, names, prefix="mlq") as cluster:
            yield cluster
    except ClusterUnavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"the four-host cluster is required in CI: {err}")
        pytest.skip(f"no four-host cluster on this machine: {err}")
