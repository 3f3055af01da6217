"""rlplug.functional against known values and against torch.distributions' KL."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributions import MultivariateNormal, kl_divergence

from rlplug.functional import gaussian_kl


def test_gaussian_kl_on_known_values():
    # one dimension: means 0 and 2 under variance 4; variances 1 and 4 about the same mean
    mu1, mu2 = torch.tensor([[0.0]]), torch.tensor([[2.0]])
    kl_mu, _ = gaussian_kl(mu1, mu2, torch.tensor([[[4.0]]]), torch.tensor([[[4.0]]]))
    assert kl_mu.item() == pytest.approx(0.5 * 2.0 ** 2 / 4.0)
    _, kl_sigma = gaussian_kl(mu1, mu1, torch.tensor([[[1.0]]]), torch.tensor([[[4.0]]]))
    assert kl_sigma.item() == pytest.approx(0.5 * (1 / 4 - 1 + math.log(4)))


def test_the_mean_part_uses_the_first_covariance_and_the_covariance_part_the_first_mean():
    mu1, mu2 = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]])
    cov1, cov2 = torch.eye(2).unsqueeze(0), 9 * torch.eye(2).unsqueeze(0)
    kl_mu, kl_sigma = gaussian_kl(mu1, mu2, cov1, cov2)
    assert kl_mu.item() == pytest.approx(0.5 * 2.0)  # under cov1 = I, not cov2
    assert kl_sigma.item() == pytest.approx(0.5 * (2 / 9 - 2 + 2 * math.log(9)))  # independent of mu2


def covariance(factor: torch.Tensor) -> torch.Tensor:
    return factor @ factor.transpose(-1, -2) + 0.1 * torch.eye(factor.shape[-1], dtype=factor.dtype)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 5), n=st.integers(1, 4), seed=st.integers(0, 2 ** 31 - 1))
def test_gaussian_kl_equals_torch_distributions(batch, n, seed):
    generator = torch.Generator().manual_seed(seed)
    mu1, mu2 = (torch.randn(batch, n, generator=generator, dtype=torch.float64) * 3 for _ in range(2))
    cov1, cov2 = (covariance(torch.randn(batch, n, n, generator=generator, dtype=torch.float64)) for _ in range(2))
    kl_mu, kl_sigma = gaussian_kl(mu1, mu2, cov1, cov2)
    expected_mu = kl_divergence(MultivariateNormal(mu1, cov1), MultivariateNormal(mu2, cov1)).mean()
    expected_sigma = kl_divergence(MultivariateNormal(mu1, cov1), MultivariateNormal(mu1, cov2)).mean()
    torch.testing.assert_close(kl_mu, expected_mu)
    torch.testing.assert_close(kl_sigma, expected_sigma)


def test_gaussian_kl_is_differentiable_and_zero_where_the_distributions_agree():
    mu = torch.randn(3, 2, requires_grad=True)
    cov = covariance(torch.randn(3, 2, 2)).requires_grad_()
    kl_mu, kl_sigma = gaussian_kl(mu, mu.detach() + 0.5, cov, cov.detach() * 2)
    (kl_mu + kl_sigma).backward()
    assert mu.grad is not None and cov.grad is not None and torch.isfinite(cov.grad).all()
    same = gaussian_kl(mu.detach(), mu.detach(), cov.detach(), cov.detach())
    assert same[0].item() == pytest.approx(0.0, abs=1e-6) and same[1].item() == pytest.approx(0.0, abs=1e-5)


def test_gaussian_kl_names_the_shapes_it_takes():
    with pytest.raises(ValueError, match=r"covariances shaped \(B, n, n\)"):
        gaussian_kl(torch.zeros(2, 3), torch.zeros(2, 3), torch.eye(3), torch.eye(3))
    with pytest.raises(ValueError, match=r"means shaped \(B, n\)"):
        gaussian_kl(torch.zeros(3), torch.zeros(3), torch.eye(3), torch.eye(3))
