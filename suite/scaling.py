"""`python -m suite.scaling`, the path users type: the code lives in suite.cluster.scaling."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.cluster.scaling", run_name="__main__", alter_sys=True)
