"""rankmap: see how the ranks of a multi-GPU job talk over the machine's links, and place them."""

__version__ = "0.1.0"
