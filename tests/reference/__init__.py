"""PyTorch references for what transformers lacks: the NextN (MTP) draft head (nextn.py)."""
