"""`python -m suite.report`, the path users type: the code lives in suite.cluster.report."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.cluster.report", run_name="__main__", alter_sys=True)
