"""Training-only PyTorch modules of GLM-5.3-Flash (`glm5next`), fast enough to train a small model on a CPU.

They compute what transformers' Glm5NextForConditionalGeneration computes (tests/scripts/test_train_modules.py checks the
logits on the same weights) and the NextN draft head of docs/model.md (as tests/reference/nextn.py), but
with a chunked KDA made of batched matmuls, the DSA selection turned into a boolean mask over the whole sequence,
and an auxiliary loss that trains the indexer. Parameter names are the hub layout's names, so a state_dict is a
checkpoint (train/hub.py).
"""
