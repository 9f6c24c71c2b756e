"""Benchmarks of tilenest against numpy, torch and numba (see `tilenest bench`)."""
