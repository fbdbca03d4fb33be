"""The shipped model family and its procedural text-to-image domain, beside (not inside) the engine.

domain: scenes, their captions and renders, the prompt grammar. data: scenes as tensors and caption
ids. family: the weights on disk (assets/, checksummed) and the "embedded" model pair. train: how
every model of the family is trained. evaluation: the evaluator (a classifier reading attributes
back), adherence and Fréchet distance. evaluate: held-out figures of the family, and the quality
measures the benchmark shares. The engine never imports this package except to load the pair by name.
"""
