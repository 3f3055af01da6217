"""Pure tensor functions of the algorithms, usable on their own: ``rlplug.functional.gaussian_kl``."""

from __future__ import annotations

import torch


def gaussian_kl(mu1: torch.Tensor, mu2: torch.Tensor, cov1: torch.Tensor,
                cov2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The KL between two batches of multivariate Gaussians, split into a mean part and a covariance part.

    ``mu1``, ``mu2`` are ``(B, n)`` means and ``cov1``, ``cov2`` ``(B, n, n)`` covariance matrices. Returns the
    batch means of ``KL(N(mu1, cov1) || N(mu2, cov1))`` (only the mean moves) and ``KL(N(mu1, cov1) || N(mu1,
    cov2))`` (only the covariance moves): MPO bounds each with its own constraint, so that a policy's mean can
    follow the data while its covariance does not collapse (pytorchrl's ``gaussian_kl``). Closed forms through
    Cholesky factors, differentiable in every argument.
    """
    if mu1.ndim != 2 or mu1.shape != mu2.shape:
        raise ValueError(f"gaussian_kl takes means shaped (B, n), got {tuple(mu1.shape)} and {tuple(mu2.shape)}")
    square = (*mu1.shape, mu1.shape[-1])
    if cov1.shape != square or cov2.shape != square:
        raise ValueError(f"gaussian_kl takes covariances shaped (B, n, n) = {square}, got {tuple(cov1.shape)} and "
                         f"{tuple(cov2.shape)}")
    chol1, chol2 = torch.linalg.cholesky(cov1), torch.linalg.cholesky(cov2)
    difference = (mu2 - mu1).unsqueeze(-1)
    kl_mu = 0.5 * (difference * torch.cholesky_solve(difference, chol1)).sum((-2, -1))
    trace = torch.cholesky_solve(cov1, chol2).diagonal(dim1=-2, dim2=-1).sum(-1)
    log_det1, log_det2 = (2 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1) for chol in (chol1, chol2))
    log_det_ratio = log_det2 - log_det1
    kl_sigma = 0.5 * (trace - mu1.shape[-1] + log_det_ratio)
    return kl_mu.mean(), kl_sigma.mean()


__all__ = ["gaussian_kl"]
