"""Evaluating the same weights gives the same accuracy and sample count at world sizes 1, 2 and 3."""
import json

import pytest

from helpers.running import run


@pytest.mark.slow
def test_eval_is_exact_at_any_world_size(small_data, tmp_path):
    results = {}
    weights = tmp_path / "weights.h5"
    # The one-process run trains briefly, saves the weights and evaluates them; the others load them (the
    # same float32 values: a reload of its own at world size 1 would evaluate the very same numbers).
    for size in (1, 2, 3):
        out = tmp_path / f"eval_{size}.json"
        # Batch 7 leaves partial last batches; 40 records over 3 shards split unevenly across ranks.
        args = ["python", "tests/scripts/eval_once.py", small_data, "7", str(weights), str(out)]
        launcher = ["mpirun", "--oversubscribe", "-np", str(size)] if size > 1 else []
        result = run(launcher + args, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        results[size] = json.loads(out.read_text())
    assert {r["count"] for r in results.values()} == {40}
    assert results[1]["accuracy"] == results[2]["accuracy"] == results[3]["accuracy"]
    # The briefly trained net tells images apart: with 10 eval images a class, predicting one
    # class for all would score exactly 0.25.
    assert results[1]["accuracy"] > 0.5
