"""MuLo-SD Explorer core: one PyTorch engine for speculative decoding of AR image generators.

Notation (used everywhere): p target model (H x W token grid), q drafter (h x w = H/r x W/r),
r up-scale factor, N = H*W, raster index t = i*W + j, NFE = sequential forward passes of a model,
k codebook neighbours pooled, tau acceptance threshold, l Chebyshev expansion radius, w ZipAR window,
island = 8-connected component of cells to resample. The core never prints, never imports Gradio
and never touches the network; it yields events.
"""
