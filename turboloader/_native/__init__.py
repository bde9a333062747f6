"""Compiled kernels. Every loop over bytes or pixels lives here; decisions live in Python."""
