"""Suite-wide settings that must be in place before any test touches torch's math libraries."""

import os

# The warp tests compare with torchvision's tensor path exactly. torchvision builds its sampling
# grid with a batched matmul that runs in MKL, and MKL picks its kernel by CPU: on AVX-512 Intel
# parts its rounding differs in the last float32 bit from the AVX2 kernel (AMD, older Intel), which
# flips a nearest-neighbour tie on a pixel or two. MKL's Conditional Numerical Reproducibility mode
# pins the oracle to the AVX2 kernel on every CPU, so "exact" means the same thing everywhere.
# MKL reads it at its first call, after this module runs; subprocesses inherit it.
os.environ.setdefault("MKL_CBWR", "AVX2")
