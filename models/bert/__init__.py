"""BERT-large pretraining (MLPerf Training v2.1): model, TF1 checkpoints, LAMB, input pipeline, workload."""
