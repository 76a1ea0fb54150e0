"""rewind: rewind-and-recover policy learning."""
__version__ = "0.1.0"
