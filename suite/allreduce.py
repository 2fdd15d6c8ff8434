"""`python -m suite.allreduce`, the path users type: the code lives in suite.train.allreduce."""
import runpy

if __name__ == "__main__":
    runpy.run_module("suite.train.allreduce", run_name="__main__", alter_sys=True)
