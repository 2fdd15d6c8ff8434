"""BERT-large pretraining (MLPerf Training v2.1): model, checkpoint loading, LAMB, input pipeline, workload."""
