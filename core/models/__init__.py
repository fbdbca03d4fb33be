"""Models: protocols, the positional KV cache, the embedded transformer and VQ tokenizer."""
