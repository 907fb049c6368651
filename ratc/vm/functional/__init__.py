"""The functional executor: trains a real model on CPU tensors by following a scheduled life program."""
