"""Tool-call codec implementations, one module per call format.

The public surface is `evalrx.models.toolcodec` (the codec registry, `codec_for` and
the codec classes); import from there.
"""
