"""Training objectives, one function each, all with one signature:
``objective(batch: ObjectiveBatch, settings: OptimizationSettings) -> (loss, metrics)``.

`ObjectiveBatch` is what a batch carries: the trained model's logits, the collator's labels
(``-100`` everywhere but the response tokens; ``logits[:, t]`` predicts ``labels[:, t + 1]``), one
advantage and one sampling temperature per sample, and per-token log-probabilities of the response
tokens, each ``(B, L - 1)`` and lined up with `response_logprobs` (position ``t`` is the token
``labels[:, t + 1]``): the behaviour policy's (what the rollout's endpoint returned; NaN where
unknown), the proximal policy's and the reference model's where the objective needs them. The
trainer builds it the same way for every objective; `NEEDS_PROXIMAL` says which objectives want the
proximal log-probabilities (and so several passes over a batch).

Logits at the labelled positions alone. A web agent's step is thousands of tokens (a 1280x720
screenshot is 880 image tokens, a memory prompt holds 5) of which a reply's hundred or two carry
labels, and full logits are a ``(B, L, V)`` tensor (8.7k positions x 151936 words: 2.5 GiB in bf16,
twice that in float32, again for the log-softmax). `logit_positions` lists the positions whose
logits some label needs; a model given them as ``logits_to_keep`` (transformers' models take a 1-D
tensor of positions) applies its output projection there alone, and `response_logprobs` with
``positions`` reads such ``(B, K, V)`` logits and returns the same ``(B, L - 1)`` tensors as from
full logits (the same numbers up to float rounding: each row of the projection and of the softmax
is computed on its own either way). The trainer does this whenever its model's forward takes
``logits_to_keep``; `ObjectiveBatch.positions` says which positions a batch's logits hold.

The policy-gradient objectives score the policy that sampled: ``log_softmax(logits / T)`` with each
sample's rollout temperature ``T`` (1 where unknown), the distribution the endpoint returns
log-probabilities of; filtered_bc imitates at temperature 1.

Normalisers. A loss is a sum over the tokens (or samples) of a micro-batch divided by the number of
response tokens (or samples) of the whole optimizer step: all its micro-batches, on all processes
(`ObjectiveBatch.step_tokens`, `step_samples`, which the trainer computes once per step, already
divided by what gradient accumulation and data parallelism divide by). So a step's gradient is the
same whether its samples come as one batch of 8, eight micro-batches of 1, or 4 on each of two
processes (DAPO's token-level loss really weighs a long reply as its tokens, also at batch size 1).
Without them (a caller of its own) the micro-batch's own counts are used.

- `filtered_bc`: behaviour cloning on the kept (successful) steps: the mean negative
  log-likelihood of the response tokens, averaged over all response tokens of the optimizer step.
  Which steps are kept, and how often each is sampled, is decided in `webgym_rl.samples`.
- `reinforce`: REINFORCE with a per-task baseline: each sample's mean response-token
  log-likelihood times its advantage, negated (a negative advantage pushes the response down).
  Off-policy samples (rolled out by an older policy version, as in the asynchronous loop) are
  corrected with a truncated importance weight ``min(clip, exp(mean_t log pi - mean_t log mu))``
  (detached; ``clip`` = ``--importance-clip``): ``mean_t log pi`` is the trained model's mean
  response-token log-probability, ``mean_t log mu`` the behaviour policy's. The ratio of per-token
  geometric means, not of whole sequences, keeps the weight finite over long replies. Samples
  without behaviour log-probabilities and ``clip == 0`` get weight 1.
- `grpo`: a clipped-ratio policy gradient on group-relative advantages, in these parts:

  * advantages (GRPO, Shao et al. 2024): ``A_i = r_i - mean(r_group)``, optionally divided by
    ``std(r_group)`` (``--normalize-advantage``), clipped to ``[-clip, clip]``, where a group is the
    attempts at one task in one iteration; groups whose rewards are all equal carry no signal and
    are dropped and counted (DAPO's dynamic sampling, Yu et al. 2025). Every step of an episode
    carries the episode's advantage (`webgym_rl.samples`).
  * the PPO clipped surrogate per response token ``t`` of sample ``i``, with separate bounds
    (DAPO's "clip-higher": ``--clip-low``, ``--clip-high``)::

        rho_t = exp(log pi_theta(t) - log pi_prox(t))
        s_t   = min(rho_t * A_i, clip(rho_t, 1 - clip_low, 1 + clip_high) * A_i)

  * decoupled PPO for stale samples (Fu et al. 2025, AReaL): ``pi_prox`` is the proximal policy,
    the weights at the start of the batch's update (with one batch per version, as AReaL runs it,
    the weights at the start of the version's update; the trainer computes its log-probabilities
    in the batch's first pass and keeps them for the other ``--ppo-epochs`` passes), and the
    surrogate is corrected by the behaviour importance weight ``w_t = exp(log pi_prox(t) - log
    mu(t))`` (detached; ``mu`` the policy that rolled the sample out). Tokens with ``w_t >
    --behaviour-cap`` are masked out (AsyncWebRL masks above 5 after a ratio spike collapsed its
    reward; 0 = no mask), so the correction is capped. Without behaviour log-probabilities (the
    random bootstrap policy, an endpoint that returns none) ``w_t = 1``: the sample is taken as
    on-policy. In the synchronous loop ``mu`` is the proximal policy and ``w_t`` is about 1.
  * an optional KL penalty to the reference (starting) model, off by default (``--kl-coef``
    ``beta``), with the unbiased per-token estimator GRPO uses (Schulman's k3)::

        k_t = exp(log pi_ref(t) - log pi_theta(t)) - (log pi_ref(t) - log pi_theta(t)) - 1  (>= 0)

  * the per-token loss ``l_t = -w_t * s_t * m_t + beta * k_t`` (``m_t`` the behaviour mask) is
    averaged with the per-step normaliser ``--loss-aggregation``: ``token-mean`` divides the sum over
    all response tokens of the optimizer step by their number (DAPO's token-level loss: a long reply
    weighs as its tokens do), ``sequence-mean`` averages each sample's tokens, then the samples of
    the step (the GRPO paper's form: every step weighs the same). Masked tokens count in the
    denominator.

  On the first pass over a batch ``pi_theta = pi_prox``, so ``rho_t = 1`` and the gradient is the
  advantage-weighted likelihood gradient; from the second pass on (``--ppo-epochs 2``), a token
  whose ratio has left the clip range in the direction its advantage pushes gets no gradient.

`OBJECTIVES` maps each `webgym_rl.samples.Objective` to the function of the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from webgym_rl.samples import Objective
from webgym_rl.settings import OptimizationSettings

__all__ = ["NEEDS_PROXIMAL", "OBJECTIVES", "ObjectiveBatch", "filtered_bc", "grpo", "importance_weights",
           "kl_k3", "logit_positions", "reinforce", "response_logprobs"]

# Detached scalar tensors: the trainer turns them into numbers only when it logs (no sync per step).
Metrics = dict[str, torch.Tensor]


@dataclass
class ObjectiveBatch:
    """What every objective is given (see the module docstring for the alignment)."""

    logits: torch.Tensor
    """``(B, L, V)``: the trained model's, with gradient; ``(B, K, V)`` at `positions` when those are
    given."""
    labels: torch.Tensor
    """``(B, L)``: token ids on the response tokens, ``-100`` elsewhere."""
    advantages: torch.Tensor
    """``(B,)``: each sample's advantage (1.0 for filtered_bc)."""
    behaviour_logprobs: torch.Tensor | None = None
    """``(B, L - 1)``: the behaviour policy's log-probability of each response token; NaN where
    unknown. None: unknown everywhere."""
    proximal_logprobs: torch.Tensor | None = None
    """``(B, L - 1)``, detached: the proximal policy's (grpo). None: the trained model's own,
    detached (the first pass over a batch)."""
    reference_logprobs: torch.Tensor | None = None
    """``(B, L - 1)``, detached: the reference (starting) model's, for grpo's KL penalty."""
    temperatures: torch.Tensor | None = None
    """``(B,)``: each sample's rollout sampling temperature (None: 1 everywhere)."""
    step_tokens: float | None = None
    """The optimizer step's response tokens (all micro-batches, all processes) divided by its
    micro-batches times processes: the token normaliser (None: this micro-batch's own count)."""
    step_samples: float | None = None
    """The same for samples: the sample normaliser (None: this micro-batch's own count)."""
    positions: torch.Tensor | None = None
    """``(K,)``: the sequence positions `logits` holds (``logits[:, k]`` is position ``positions[k]``'s),
    `logit_positions` of the labels, when the model computed its logits there alone. None: `logits`
    holds every position."""

    def tokens_normaliser(self, mask: torch.Tensor) -> torch.Tensor | float:
        return mask.sum().clamp(min=1) if self.step_tokens is None else max(self.step_tokens, 1e-9)

    def samples_normaliser(self) -> torch.Tensor | float:
        return float(self.labels.shape[0]) if self.step_samples is None else max(self.step_samples, 1e-9)


def logit_positions(labels: torch.Tensor) -> torch.Tensor:
    """The positions ``t`` (sorted, ``(K,)``) whose logits predict a labelled token, ``labels[:, t + 1]``,
    in some sample of the batch; position 0 alone when no token is labelled. Give them to the model
    as ``logits_to_keep`` and to `response_logprobs` (or `ObjectiveBatch`) as ``positions``."""
    labelled = (labels[:, 1:] != -100).any(dim=0)
    positions = labelled.nonzero().squeeze(1)
    return positions if positions.numel() else torch.zeros(1, dtype=torch.long, device=labels.device)


def response_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperatures: torch.Tensor | None = None,
                      positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of the labelled tokens and their mask, both ``(B, L - 1)``
    (0 where the mask is False), under ``softmax(logits / temperature)`` (`temperatures`: one per
    sample; None: 1). `positions`: the positions `logits` holds (``(B, K, V)`` logits, see
    `logit_positions`, which every labelled token's position must be among); None: ``(B, L, V)``."""
    targets = labels[:, 1:]
    mask = targets != -100
    if positions is None:
        kept_targets, kept_mask, logits = targets, mask, logits[:, :-1].float()
    else:
        kept_targets, kept_mask, logits = targets[:, positions], mask[:, positions], logits.float()
    if temperatures is not None:
        logits = logits / temperatures.to(logits)[:, None, None]
    safe_targets = kept_targets.masked_fill(~kept_mask, 0)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1) * kept_mask
    if positions is None:
        return logp, mask
    return logp.new_zeros(mask.shape).index_copy(1, positions, logp), mask


def filtered_bc(batch: ObjectiveBatch, settings: OptimizationSettings) -> tuple[torch.Tensor, Metrics]:
    """Mean negative log-likelihood of the response tokens (advantages are ignored)."""
    logp, mask = response_logprobs(batch.logits, batch.labels, positions=batch.positions)
    tokens = mask.sum()
    loss = -logp.sum() / batch.tokens_normaliser(mask)
    return loss, {"nll": -logp.detach().sum() / tokens.clamp(min=1), "tokens": tokens.detach().float()}


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


def reinforce(batch: ObjectiveBatch, settings: OptimizationSettings) -> tuple[torch.Tensor, Metrics]:
    """``-mean_b(w_b * advantage_b * mean_t log p(response_b,t))``, `w` the truncated importance
    weights (`importance_weights` of the per-sample mean behaviour log-probability; 1 without)."""
    logp, mask = response_logprobs(batch.logits, batch.labels, batch.temperatures, batch.positions)
    per_sample = logp.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    advantages = batch.advantages.to(per_sample.dtype)
    behaviour = None
    if batch.behaviour_logprobs is not None:
        nan = torch.full_like(per_sample[:, None].expand_as(logp), float("nan"))
        behaviour = torch.nanmean(torch.where(mask, batch.behaviour_logprobs.to(logp.dtype), nan), dim=1)
    weights = importance_weights(per_sample, behaviour, settings.importance_clip)
    loss = -(weights * advantages * per_sample).sum() / batch.samples_normaliser()
    return loss, {"nll": -per_sample.detach().mean(), "advantage_mean": advantages.detach().mean(),
                  "importance_weight_mean": weights.mean(), "tokens": mask.sum().float()}


def kl_k3(logp: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Per-token ``exp(ref - logp) - (ref - logp) - 1``: an unbiased, non-negative estimate of
    KL(pi_theta || pi_ref) from samples of pi_theta; 0 where the two agree."""
    delta = reference - logp
    return torch.exp(delta) - delta - 1


def grpo(batch: ObjectiveBatch, settings: OptimizationSettings) -> tuple[torch.Tensor, Metrics]:
    """The clipped, decoupled, optionally KL-penalised surrogate of the module docstring."""
    g = settings.grpo
    logp, mask = response_logprobs(batch.logits, batch.labels, batch.temperatures, batch.positions)
    proximal = logp.detach() if batch.proximal_logprobs is None else batch.proximal_logprobs.to(logp.dtype)
    advantages = batch.advantages.to(logp.dtype)[:, None]
    ratio = torch.exp(logp - proximal)
    clipped = ratio.clamp(1 - g.clip_low, 1 + g.clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)

    # Decoupled PPO: the behaviour correction pi_prox / mu, tokens above the cap masked out.
    weight = torch.ones_like(logp)
    if batch.behaviour_logprobs is not None:
        behaviour = batch.behaviour_logprobs.to(logp.dtype)
        known = ~torch.isnan(behaviour) & mask
        weight = torch.where(known, torch.exp(proximal - torch.nan_to_num(behaviour)), weight)
    kept = mask & (weight <= g.behaviour_cap) if g.behaviour_cap > 0 else mask
    weight = torch.where(kept, weight, torch.zeros_like(weight))  # no inf * 0 on masked tokens
    per_token = -(weight * surrogate)
    kl = torch.zeros_like(logp)
    if g.kl_coef > 0:
        if batch.reference_logprobs is None:
            raise ValueError("grpo: kl_coef > 0 needs the reference model's log-probabilities")
        kl = kl_k3(logp, batch.reference_logprobs.to(logp.dtype)) * mask
        per_token = per_token + g.kl_coef * kl

    tokens = mask.sum()
    if g.loss_aggregation == "token-mean":
        loss = per_token.sum() / batch.tokens_normaliser(mask)
    else:
        loss = (per_token.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum() / batch.samples_normaliser()
    n = tokens.clamp(min=1).float()
    at_clip = ((ratio > 1 + g.clip_high) & (advantages > 0)) | ((ratio < 1 - g.clip_low) & (advantages < 0))
    return loss, {
        "nll": (-logp.detach().sum() / n), "advantage_mean": batch.advantages.detach().float().mean(),
        "ratio_mean": (ratio.detach() * mask).sum() / n, "clip_fraction": (at_clip & mask).sum() / n,
        "behaviour_masked_fraction": (mask & ~kept).sum() / n,
        "behaviour_weight_mean": (weight.detach() * kept).sum() / kept.sum().clamp(min=1),
        "kl": kl.detach().sum() / n, "tokens": tokens.detach().float()}


NEEDS_PROXIMAL = frozenset({Objective.GRPO})
"""The objectives that take the proximal log-probabilities: the trainer computes them once per batch
(in its first pass) and makes ``--ppo-epochs`` passes over it."""

# Each objective's loss is the function named after it: a new `Objective` without one fails here.
OBJECTIVES: dict[Objective, Callable[[ObjectiveBatch, OptimizationSettings], tuple[torch.Tensor, Metrics]]
                 ] = {objective: globals()[objective.value] for objective in Objective}
