"""MLPerf Training ResNet-50 v1.5 (rules v1.1 and v2.1)."""
