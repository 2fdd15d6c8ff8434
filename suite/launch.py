"""`python -m suite.launch`, the path users type: the code lives in suite.cluster.launch."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.cluster.launch", run_name="__main__", alter_sys=True)
