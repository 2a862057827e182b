"""The training objective: next-token loss of the trunk, the NextN head's loss on the token after next (optionally
more draft steps under index sharing), and the indexers' auxiliary loss."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .dsa import DSAOut
from .model import Glm5NextTrain


@dataclass
class Losses:
    total: torch.Tensor           # what backward() runs on
    lm: torch.Tensor              # trunk: mean CE of x_{p+1} from row p
    draft: list[torch.Tensor]     # draft step k: mean CE of x_{p+k+2}
    indexer: torch.Tensor         # mean indexer KL over the DSA layers (0 in eval mode)


def _ce(model: Glm5NextTrain, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model.lm_head(z).flatten(0, 1), targets.flatten())


def first_rows(rec: DSAOut, n: int) -> DSAOut:
    """The first n rows of a step-0 record (row p's selection only holds rows <= p, so the slice is closed)."""
    return DSAOut(rec.out[:, :n], rec.mask[:, :n, :n], rec.latent[:, :n], None)


def losses(model: Glm5NextTrain, ids: torch.Tensor, mtp_steps: int = 1, mtp_weight: float = 0.3,
           indexer_weight: float = 1.0) -> Losses:
    """ids [B, L] int64 (L > mtp_steps + 2) -> Losses.

    Draft step 0 is teacher-forced over every row: row p = (h_p, x_{p+1}) predicts x_{p+2} (tests/reference/nextn.py).
    Step k >= 1 is row p = (z_{k-1}[p], x_{p+k+1}) predicting x_{p+k+2}, attending step 0's rows under step 0's
    selection S(p): what the runtime computes under index_share_for_mtp_iteration, with the true token standing in
    for the drafted one. The draft loss reaches the trunk (weighted by mtp_weight, as DeepSeek-V3's MTP loss);
    the indexer loss reaches only the indexers (their inputs are detached).
    """
    seq = ids.shape[1]
    trunk = model.trunk(ids)
    lm = _ce(model, trunk.hidden[:, :-1], ids[:, 1:])
    rows = seq - 2
    z, step0 = model.draft(trunk.hidden[:, :rows], ids[:, 1: rows + 1])
    draft = [_ce(model, z, ids[:, 2:])]
    for k in range(1, mtp_steps):
        rows = seq - 2 - k
        z, _ = model.draft(z[:, :rows], ids[:, k + 1: k + 1 + rows], first_rows(step0, rows))
        draft.append(_ce(model, z, ids[:, k + 2:]))
    aux = [r.aux for r in trunk.dsa + [step0] if r.aux is not None]
    indexer = torch.stack(aux).mean() if aux else lm.new_zeros(())
    total = lm + mtp_weight * torch.stack(draft).mean() + indexer_weight * indexer
    return Losses(total, lm, draft, indexer)
