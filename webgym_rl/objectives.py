"""Training objectives, one function each: ``(logits, labels, advantages) -> (loss, metrics)``.

- `filtered_bc`: behaviour cloning on the kept (successful) steps: the mean negative
  log-likelihood of the response tokens, averaged over all response tokens of the batch.
  Which steps are kept, and how often each is sampled, is decided in `webgym_rl.samples`.
- `reinforce`: REINFORCE with a per-task baseline: each sample's mean response-token
  log-likelihood times its advantage, negated (a negative advantage pushes the response down).
  Off-policy samples (rolled out by an older policy version, as in the asynchronous loop) are
  corrected with a truncated importance weight ``min(clip, exp(mean_t log pi - mean_t log mu))``
  (detached): ``mean_t log pi`` is the trained model's mean response-token log-probability,
  ``mean_t log mu`` the behaviour policy's, from the log-probabilities its endpoint returned
  (`Sample.behaviour_logprob`). The ratio of per-token geometric means, not of whole sequences,
  keeps the weight finite over long replies and does not depend on the trainer re-tokenising the
  reply into exactly the endpoint's tokens. Samples without behaviour log-probabilities (NaN) and
  ``clip == 0`` get weight 1.

`OBJECTIVES` maps each `webgym_rl.samples.Objective` to the function of the same name.

``labels`` are the collator's: ``-100`` everywhere but the response tokens; ``logits[:, t]``
predicts ``labels[:, t + 1]``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from webgym_rl.samples import Objective

__all__ = ["OBJECTIVES", "filtered_bc", "importance_weights", "reinforce", "response_logprobs"]

# Detached scalar tensors: the trainer turns them into numbers only when it logs (no sync per step).
Metrics = dict[str, torch.Tensor]


def response_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of the labelled tokens and their mask, both ``(B, L - 1)``."""
    targets = labels[:, 1:]
    mask = targets != -100
    logits = logits[:, :-1].float()
    safe_targets = targets.masked_fill(~mask, 0)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1)
    return logp * mask, mask


def filtered_bc(logits: torch.Tensor, labels: torch.Tensor,
                advantages: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """Mean negative log-likelihood of the response tokens (advantages are ignored)."""
    logp, mask = response_logprobs(logits, labels)
    tokens = mask.sum()
    loss = -logp.sum() / tokens.clamp(min=1)
    return loss, {"nll": loss.detach(), "tokens": tokens.detach().float()}


def importance_weights(per_sample: torch.Tensor, behaviour: torch.Tensor | None,
                       clip: float) -> torch.Tensor:
    """Truncated importance weights ``min(clip, exp(per_sample - behaviour))``, detached; 1 where
    `behaviour` is NaN (no stored log-probabilities), everywhere when `clip` is 0."""
    ones = torch.ones_like(per_sample)
    if behaviour is None or clip <= 0:
        return ones
    behaviour = behaviour.to(per_sample.dtype)
    known = ~torch.isnan(behaviour)
    ratio = torch.exp(per_sample.detach() - torch.nan_to_num(behaviour)).clamp(max=clip)
    return torch.where(known, ratio, ones)


def reinforce(logits: torch.Tensor, labels: torch.Tensor, advantages: torch.Tensor,
              behaviour: torch.Tensor | None = None, importance_clip: float = 0.0
              ) -> tuple[torch.Tensor, Metrics]:
    """``-mean_b(w_b * advantage_b * mean_t log p(response_b,t))``, `w` the truncated importance
    weights (`importance_weights`; 1 without `behaviour`)."""
    logp, mask = response_logprobs(logits, labels)
    per_sample = logp.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    advantages = advantages.to(per_sample.dtype)
    weights = importance_weights(per_sample, behaviour, importance_clip)
    loss = -(weights * advantages * per_sample).mean()
    return loss, {"nll": -per_sample.detach().mean(), "advantage_mean": advantages.detach().mean(),
                  "importance_weight_mean": weights.mean(), "tokens": mask.sum().float()}


# Each objective's loss is the function named after it: a new `Objective` without one fails here.
OBJECTIVES: dict[Objective, Callable[..., tuple[torch.Tensor, Metrics]]] = {
    objective: globals()[objective.value] for objective in Objective}
