"""`python -m suite.sweep`, the path users type: the code lives in suite.cluster.sweep."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.cluster.sweep", run_name="__main__", alter_sys=True)
