"""`python -m suite.deploy`, the path users type: the code lives in suite.cluster.deploy."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.cluster.deploy", run_name="__main__", alter_sys=True)
