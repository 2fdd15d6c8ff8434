"""`python -m models.tinymlp`: the third benchmark, alone or under horovodrun, mpirun or srun."""
import sys

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
from suite.train.runner import main as run_main


def main(argv=None):
    from models.tinymlp.workload import SPEC
    return run_main(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
